"""The model-kind seam (:mod:`ptebuild.models.base`): the hooks' defaults and :class:`FolderOutputs`.

A kind that overrides nothing but its table and its build takes the backend's tolerances, the
model's methods, no extra outputs or files, no options model of its own, and refuses ``--prompt``
with one line naming the program; the hooks it must implement raise NotImplementedError.
:class:`FolderOutputs` writes each output as a file in its folder, streamed or copied.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ptebuild.backends import get_backend
from ptebuild.errors import UsageError
from ptebuild.models import get_model_kind
from ptebuild.models.base import FolderOutputs, ModelKind, Outputs, ResolvedModel
from ptebuild.plan import BuildPlan, DimPlan, InputPlan, MethodPlan, ProgramPlan

FORWARD = MethodPlan("forward", "forward", (InputPlan("x", ("batch", 6), "float32"),), (DimPlan("batch", 1, 4, 2),))
SCORE = MethodPlan("score", "score", (InputPlan("x", (1, 6), "float32"),), ())


class TableOnly(ModelKind):
    """A kind that declares nothing beyond its name: every hook is the base's."""

    name = "table-only"


KIND = TableOnly()


def test_a_kind_that_overrides_nothing_gets_every_builder_default():
    xnnpack = get_backend("xnnpack")
    options = xnnpack.options_model.model_validate({"quantize": "int8"})
    assert KIND.program_options_model("xnnpack") is None  # the backend's own
    assert KIND.program_problem(None, "xnnpack", xnnpack, options, None) is None
    assert KIND.extra_outputs("p", ResolvedModel(methods={"forward": FORWARD}), options) == ()
    assert KIND.program_files(options) == ()
    methods = {"forward": FORWARD, "score": SCORE}
    assert KIND.program_methods(methods, options) is methods
    assert (KIND.generates_text, KIND.no_test_cases, KIND.no_etrecord) == (False, None, None)


@pytest.mark.parametrize("quantize", ["none", "int8"])
def test_the_check_takes_the_backends_tolerance_for_the_programs_options(quantize):
    """XNNPACK's int8 programs are held to looser bounds than its float ones: a kind passes that on."""
    xnnpack = get_backend("xnnpack")
    options = xnnpack.options_model.model_validate({"quantize": quantize})
    assert KIND.check_defaults(xnnpack, options) == xnnpack.check_defaults(options)
    assert (KIND.check_defaults(xnnpack, options).atol > 0.01) is (quantize == "int8")


@pytest.mark.parametrize("hook", ["spec_model", "resolve", "build"])
def test_the_hooks_a_kind_must_implement_raise(hook, tmp_path):
    arguments = {
        "spec_model": {},
        "resolve": {"spec": None, "display": "m.toml", "model_name": "m", "manifest_dir": tmp_path},
        "build": {"job": None},
    }[hook]
    with pytest.raises(NotImplementedError):
        getattr(KIND, hook)(**arguments)


def test_a_kind_that_is_no_language_model_refuses_a_prompt_in_one_line():
    program = ProgramPlan(name="tiny_portable", model="tiny", backend="portable", factory="tinymodels.tiny:make_tiny", kwargs={},
                          weights=None, seed=0, sources=(), methods=(FORWARD,), data_name=None, options={}, atol=1e-4,
                          min_cosine=0.99999, check_enabled=True, model_entry={}, program_entry={})
    plan = BuildPlan(manifest="robot.toml", manifest_dir="/project", out="out", programs=(program,))
    with pytest.raises(UsageError) as caught:
        get_model_kind("factory").generate(plan, program, "hello", max_new_tokens=4, out_dir=None)
    assert str(caught.value) == ("robot.toml: program 'tiny_portable' is not a language model (factory model); "
                                 "--prompt is for programs of executorch-llm models: drop --prompt")


def test_a_resolved_models_defaults():
    resolved = ResolvedModel(methods={"forward": FORWARD})
    assert (resolved.seed, resolved.factory, resolved.kwargs, resolved.weights, resolved.sources, resolved.model_files) == (
        0, "", {}, None, (), ())
    assert ResolvedModel(methods={}).kwargs is not resolved.kwargs  # each its own


def test_folder_outputs_stream_each_file_into_a_folder_it_makes(tmp_path):
    folder = tmp_path / "new" / "outputs"
    outputs: Outputs = FolderOutputs(folder)
    path = outputs.stream("p.pte", lambda file: [file.write(b"PTE-%d" % i) for i in range(3)])
    assert path == folder / "p.pte" and path.read_bytes() == b"PTE-0PTE-1PTE-2"
    again = outputs.stream("p.pte", lambda file: file.write(b"new"))
    assert again.read_bytes() == b"new"  # a second write replaces the first


def test_folder_outputs_copy_a_file_by_its_bytes(tmp_path):
    source = tmp_path / "tokenizer.json"
    source.write_bytes(b'{"model": {"vocab": {}}}' * 1000)
    outputs = FolderOutputs(tmp_path / "out")
    copied = outputs.copy("p.tokenizer.json", source)
    assert copied == tmp_path / "out" / "p.tokenizer.json" and copied.read_bytes() == source.read_bytes()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["p.tokenizer.json"]


def test_folder_outputs_hand_the_writer_a_binary_file(tmp_path):
    seen: list[object] = []

    def write(file) -> None:
        seen.append(isinstance(file, io.BufferedIOBase))
        file.write(bytes(range(256)))

    path = FolderOutputs(tmp_path).stream("b.ptd", write)
    assert seen == [True] and Path(path).read_bytes() == bytes(range(256))
