"""``ptebuild build``'s own printing: one error line per cause, however many programs it stops."""

from __future__ import annotations

from ptebuild.cli.build import error_lines


def test_one_cause_shared_by_programs_is_one_line_that_names_them():
    weights = "m.toml: models.policy.weights: 'last.ckpt' is a dict of 3 entries ...; set weights_key = 'model'"
    assert error_lines([("policy_portable", weights), ("policy_xnnpack", weights)]) == [
        f"{weights} (programs policy_portable and policy_xnnpack)"]


def test_each_program_keeps_its_log_and_a_shared_cause_names_the_logs_folder():
    cause = "m.toml: programs.{}: lowering for xnnpack failed: RuntimeError: x; report it to ExecuTorch"
    shared = "m.toml: models.p.weights: cannot load 'w.pt' as a state dict: EOFError"
    failed = [
        ("a", cause.format("a") + " (full output: out/.ptebuild/logs/a.log)"),
        ("b", shared + " (full output: out/.ptebuild/logs/b.log)"),
        ("c", shared + " (full output: out/.ptebuild/logs/c.log)"),
        ("d", shared + " (full output: out/.ptebuild/logs/d.log)"),
    ]
    assert error_lines(failed) == [
        cause.format("a") + " (full output: out/.ptebuild/logs/a.log)",
        f"{shared} (programs b, c and d; full output: out/.ptebuild/logs/<program>.log)",
    ]


def test_one_cause_located_at_each_program_is_one_line_at_the_first():
    """The GPU host's robot build: every CPU program stopped by the same cause, each message located
    at its own program. One line, at the first program's place, names them all; a cause whose
    advice differs by program (its backend to skip) stays a line of its own."""
    cause = ("m.toml: programs.{}: not in the cache, and this machine cannot run its check (executorch-runtime): "
             "RuntimeError: tensor does not have a device; build it where the check runs, or leave it out with --skip-backend {}")
    failed = [("policy_portable", cause.format("policy_portable", "portable")),
              ("policy_xnnpack", cause.format("policy_xnnpack", "xnnpack")),
              ("policy_xnnpack_int8", cause.format("policy_xnnpack_int8", "xnnpack"))]
    assert error_lines(failed) == [
        cause.format("policy_portable", "portable"),
        cause.format("policy_xnnpack", "xnnpack") + " (programs policy_xnnpack and policy_xnnpack_int8)",
    ]
