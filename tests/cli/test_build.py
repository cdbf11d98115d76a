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
