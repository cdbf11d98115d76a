"""Inputs bind to the function's parameters by name (issue 28, item 1). A name that is no parameter,
through the command line: tests/manifests/misfits/misfit-extra-input.toml.

The rules on plain functions (no torch), then ``tests/manifests/decoders.toml`` built through
the command line: a Hugging Face style ``forward(input_ids=None, inputs_embeds=None,
cache_position=None, scale=1.0)`` declared with ``input_ids``, ``cache_position`` and the scalar
``scale``, which by position failed "torch.export of method 'forward' failed: TypeError: 'float'
object is not subscriptable" (``cache_position`` landed in ``inputs_embeds``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ptebuild

from ptebuild.errors import ManifestError
from ptebuild.lowering.binding import Binding, BoundByPosition, bind
from ptebuild.plan import InputPlan, MethodPlan

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def method(*names: str) -> MethodPlan:
    return MethodPlan("forward", "forward", tuple(InputPlan(n, (1,), "float32") for n in names), ())


def hf_forward(input_ids=None, inputs_embeds=None, cache_position=None):
    return input_ids, inputs_embeds, cache_position


def test_inputs_bind_by_name_and_the_rest_keep_their_defaults():
    binding = bind(hf_forward, method("input_ids", "cache_position"), "lm")
    assert binding == Binding((), (("input_ids", 0), ("cache_position", 1)))
    assert binding.call(hf_forward, ["ids", "positions"]) == ("ids", None, "positions")
    # Declared in another order than the parameters: still each by its name.
    assert bind(hf_forward, method("cache_position", "input_ids"), "lm").call(hf_forward, ["p", "i"]) == ("i", None, "p")


def test_a_name_that_is_not_a_parameter_is_located_at_that_input():
    with pytest.raises(ManifestError) as info:
        bind(hf_forward, method("input_ids", "cache_pos"), "lm")
    assert str(info.value) == (
        "models.lm.methods.forward.inputs[1].name: 'cache_pos' is not a parameter of "
        "hf_forward(input_ids=None, inputs_embeds=None, cache_position=None) (did you mean 'cache_position'?); "
        "name each input after the parameter it is passed as (input_ids, inputs_embeds, cache_position)"
    )


def cnn_forward(x, h=None):
    return x


def test_a_manifest_that_passed_inputs_by_position_gets_every_rename():
    """A manifest of a release that bound inputs by position (``image``, ``state`` on a
    ``forward(x, h)``): the error names each rename, and carries them for the build's one line."""
    with pytest.raises(BoundByPosition) as info:
        bind(cnn_forward, method("image", "state"), "cnn")
    assert info.value.renames == (("models.cnn.methods.forward.inputs[0].name", "image", "x"),
                                  ("models.cnn.methods.forward.inputs[1].name", "state", "h"))
    assert str(info.value) == (
        "models.cnn.methods.forward.inputs[0].name: 'image' is not a parameter of cnn_forward(x, h=None): inputs are bound "
        "to the parameters by name (releases before passed them by position); rename the method's inputs after its "
        "parameters: 'image' -> 'x', 'state' -> 'h'")
    # One name a parameter, or a near miss of one: a typo, said as one.
    with pytest.raises(ManifestError) as typo:
        bind(hf_forward, method("input_ids", "cache_pos"), "lm")
    assert not isinstance(typo.value, BoundByPosition)
    with pytest.raises(ManifestError) as near:
        bind(cnn_forward, method("xx"), "m")
    assert not isinstance(near.value, BoundByPosition)


def test_a_required_parameter_no_input_names_and_a_name_given_twice():
    def forward(x, state, gain=1.0):
        return x

    with pytest.raises(ManifestError) as info:
        bind(forward, method("x", "gain"), "m")
    assert str(info.value) == (
        "models.m.methods.forward.inputs: the inputs (x, gain) do not fit "
        "test_a_required_parameter_no_input_names_and_a_name_given_twice.<locals>.forward(x, state, gain=1.0): "
        "missing a required argument: 'state'; declare one input per parameter it needs, named after it"
    )
    with pytest.raises(ManifestError, match=r"^models\.m\.methods\.forward\.inputs\[2\]\.name: 'x' is declared twice"):
        bind(forward, method("x", "state", "x"), "m")


def test_star_args_keep_positional_binding():
    def forward(*args, scale=1.0):
        return args, scale

    binding = bind(forward, method("a", "b", "scale"), "m")
    assert binding == Binding((0, 1), (("scale", 2),))
    assert binding.call(forward, [1, 2, 3]) == ((1, 2), 3)

    def head_then_rest(x, *rest):
        return x, rest

    assert bind(head_then_rest, method("first", "second"), "m").call(head_then_rest, [1, 2]) == (1, (2,))


def test_keyword_catch_all_positional_only_and_builtins():
    def forward(x, **extra):
        return x, extra

    assert bind(forward, method("x", "mask"), "m").call(forward, [1, 2]) == (1, {"mask": 2})

    def by_position(a, b, /, c=0):
        return a, b, c

    assert bind(by_position, method("c", "b", "a"), "m").call(by_position, [3, 2, 1]) == (1, 2, 3)
    with pytest.raises(ManifestError, match=r"takes 'a' by position only, before 'b'; declare it too$"):
        bind(by_position, method("b"), "m")
    # A builtin's signature cannot be read: by position, as before.
    assert bind(max, method("p", "q"), "m").call(max, [3, 5]) == 5


def test_pytorchs_own_modules_take_their_inputs_by_position():
    """``nn.Sequential.forward(input)``: torch's generic parameter names are not what a manifest
    names (``image``, ``x``); such a model's inputs go by position, as they always did."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert bind(model.forward, method("image"), "m") == Binding((0,))
    assert bind(torch.nn.Linear(2, 2).forward, method("x"), "m") == Binding((0,))

    class Own(torch.nn.Module):
        def forward(self, image):
            return image

    with pytest.raises(ManifestError, match=r"^models\.m\.methods\.forward\.inputs\[0\]\.name: 'x' is not a parameter"):
        bind(Own().forward, method("x"), "m")


@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """``decoders.toml`` built once: (its project folder, the build)."""
    project = tmp_path_factory.mktemp("decoders")
    shutil.copy(MANIFESTS / "decoders.toml", project / "decoders.toml")
    shutil.copytree(MANIFESTS / "decodermodels", project / "decodermodels", ignore=shutil.ignore_patterns("__pycache__"))
    return project, ptebuild("build", project / "decoders.toml", "--cache", project / "cache", "--keep-going")


# Slow: decoders.toml built, checked, bundled and run (25 s); the binding rules above are its fast siblings.
@pytest.mark.slow
def test_a_hugging_face_style_forward_builds_checks_bundles_and_runs(decoders):
    project, done = decoders
    assert done.returncode == 0, done.stderr
    out = project / "out"
    # The .bpte's inputs are the exported program's, in its order: ExecuTorch's own API verifies them.
    verified = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("bpte_verify.py")), str(out / "hf_xnnpack.bpte"), str(out / "hf_weights.ptd"),
         "--atol", "1e-4"],
        capture_output=True, text=True,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.count(": ok") == 3  # the example size, seq 1 and seq 8
    # `ptebuild run`: the eager model bound by name, the program fed the flat inputs in its order.
    from ptebuild.manifest import load_manifest
    from ptebuild.worker.timed_run import run_program

    ran = run_program(load_manifest(project / "decoders.toml"), "hf_xnnpack", iters=1)
    assert ran.within_tolerance and ran.methods[0].max_abs_error < 1e-5
