"""A method's samples: read from a file, a folder or a factory, held to the declared inputs (a
sample that does not fit is a located manifest error), part of the key, bundled in the ``.bpte``."""

from __future__ import annotations

import pytest
import torch

from ptebuild.errors import ManifestError
from ptebuild.lowering.samples import check_samples, load_samples, sample_files, sizes_of
from ptebuild.plan import DimPlan, InputPlan, MethodPlan

WHERE = "models.m.methods.forward.samples"


def method(samples: str | None = None) -> MethodPlan:
    return MethodPlan(
        "forward", "forward",
        (
            InputPlan("image", ("batch", 3, 8, 8), "float32"),
            InputPlan("obs", (), "", kind="dict", items=(InputPlan("joints", ("batch", 4), "float32"),
                                                           InputPlan("step", ("batch",), "int64"))),
            InputPlan("gain", (), "", kind="scalar", value=0.5),
        ),
        (DimPlan("batch", 1, 4, 2),),
        samples=samples,
    )


def sample(batch: int = 2, **changes):
    image = torch.randn(batch, 3, 8, 8)
    obs = {"joints": torch.randn(batch, 4), "step": torch.arange(batch)}
    parts = {"image": image, "obs": obs, "gain": 0.5, **changes}
    return (parts["image"], parts["obs"], parts["gain"])


@pytest.mark.parametrize(("bad", "expected"), [
    ((torch.randn(2, 3, 8, 8),), "sample 1: 1 inputs, the method declares 3 ('image', 'obs', 'gain')"),
    (sample(image=torch.randn(2, 3, 8, 9)),
     "sample 1: input 'image' (inputs[0]): shape (2, 3, 8, 9), declared ['batch', 3, 8, 8] (dim 3 is 9, declared 8)"),
    (sample(image=torch.randn(2, 3, 8, 8, dtype=torch.float64)), "sample 1: input 'image' (inputs[0]): dtype float64, declared float32"),
    (sample(batch=6), "sample 1: input 'image' (inputs[0]): shape (6, 3, 8, 8), declared ['batch', 3, 8, 8] (batch is 6, outside its range 1..4)"),
    (sample(obs={"joints": torch.randn(3, 4), "step": torch.arange(2)}),
     "sample 1: input 'obs' (inputs[1])['joints']: batch is 3, and 2 in input 'image' (inputs[0]): one sample has one size per dim"),
    (sample(obs={"joints": torch.randn(2, 4)}), "sample 1: input 'obs' (inputs[1]): keys ['joints'], declared a dict with keys ['joints', 'step']"),
    (sample(gain=2.0), "sample 1: input 'gain' (inputs[2]): 2.0, declared the scalar 0.5"),
])
def test_a_sample_that_does_not_fit_is_named_with_what_is_declared(bad, expected):
    with pytest.raises(ManifestError) as info:
        check_samples([sample(), bad], method(), "m.toml", WHERE)
    assert str(info.value).startswith(f"m.toml: {WHERE}: {expected}"), str(info.value)


def test_samples_come_from_a_file_a_folder_or_a_factory(tmp_path, monkeypatch):
    torch.save(sample(), tmp_path / "one.pt")  # one tuple
    folder = tmp_path / "set"
    folder.mkdir()
    torch.save([sample(1), sample(3)], folder / "a.pt")  # a list of tuples
    torch.save(sample(4), folder / "b.pth")
    (folder / "README").write_text("not a sample")
    (tmp_path / "factories.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return [(torch.zeros(1, 3, 8, 8), {'joints': torch.zeros(1, 4), 'step': torch.zeros(1, dtype=torch.int64)}, 0.5)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert len(load_samples("m", method("one.pt"), tmp_path, "m.toml")) == 1
    found = load_samples("m", method("set"), tmp_path, "m.toml")
    assert [sizes_of(s, method()) for s in found] == [{"batch": 1}, {"batch": 3}, {"batch": 4}]
    assert list(sample_files("set", tmp_path)) == ["set/a.pt", "set/b.pth"]  # *.pt and *.pth, in order
    assert len(load_samples("m", method("factories:make"), tmp_path, "m.toml")) == 1


@pytest.mark.parametrize(("spec", "expected"), [
    ("missing.pt", "no such file or folder 'missing.pt'; give a file or folder relative to the manifest"),
    ("empty", "folder 'empty' holds no *.pt or *.pth file; give a file or folder relative to the manifest"),
    ("state.pt", "file 'state.pt' holds a dict, not a tuple of inputs or a list of such tuples; give a tuple of the "
                 "method's inputs, or a list of such tuples"),
    ("badfactories:maek", "module 'badfactories' has no attribute 'maek' (did you mean 'make'?); name a callable that "
                          "returns the samples (badfactories:NAME)"),
    ("badfactories:broken", "samples factory 'badfactories:broken' failed: ValueError: no data here; fix the factory "
                            "(it is called without arguments)"),
])
def test_samples_that_cannot_be_read_are_located(tmp_path, monkeypatch, spec, expected):
    (tmp_path / "empty").mkdir()
    torch.save({"weight": torch.zeros(2)}, tmp_path / "state.pt")
    (tmp_path / "badfactories.py").write_text("def make():\n    return []\ndef broken():\n    raise ValueError('no data here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ManifestError) as info:
        load_samples("m", method(spec), tmp_path, "m.toml")
    assert str(info.value) == f"m.toml: {WHERE}: {expected}"


def test_a_build_with_samples_that_do_not_fit_exits_2_at_the_samples_entry(tiny_project):
    from helpers import ptebuild

    torch.save([(torch.randn(2, 6),), (torch.randn(2, 5),)], tiny_project.parent / "real.pt")
    tiny_project.write_text(tiny_project.read_text().replace(
        'inputs = [{ name = "x", shape = ["batch", 6] }]', 'inputs = [{ name = "x", shape = ["batch", 6] }]\nsamples = "real.pt"', 1))
    done = ptebuild("build", tiny_project, "--cache", tiny_project.parent / "cache", "--only", "tiny_portable")
    assert done.returncode == 2, done.stderr
    assert ("tiny.toml: models.tiny.methods.forward.samples: sample 1: input 'x' (inputs[0]): shape (2, 5), "
            "declared ['batch', 6] (dim 1 is 5, declared 6)") in done.stderr
