"""A dynamic dim the model cannot take, explained as the manifest key to change
(:mod:`ptebuild.lowering.dims_fit`), from torch.export's own constraint violations; and
``multiple_of``, the dims a model takes only in multiples, exported and built."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import build_json
from recurrent_models import KeywordSpotter

from ptebuild.lowering.dims_fit import explain_dims, suggested_fixes
from ptebuild.models.factory.lower import dynamic_shapes
from ptebuild.plan import DimPlan, InputPlan, MethodPlan


class Loop(torch.nn.Module):
    def forward(self, x):
        return torch.stack([x[:, i] * i for i in range(x.shape[1])], 1)


class Capped(torch.nn.Module):
    def forward(self, x):
        torch._check(x.shape[1] <= 16)
        return x * 2


class Halves(torch.nn.Module):
    def forward(self, x):
        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)


class Pair(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def _method(*shapes, dims: tuple[DimPlan, ...]) -> MethodPlan:
    inputs = tuple(InputPlan(name, shape, "float32") for name, shape in zip("xy", shapes))
    return MethodPlan("forward", "forward", inputs, dims)


def _violation(model: torch.nn.Module, method: MethodPlan) -> str:
    args = tuple(torch.randn(*method.example_shape(spec)) for spec in method.inputs)
    with pytest.raises(Exception) as caught:
        torch.export.export(model, args, dynamic_shapes=dynamic_shapes(method), strict=False)
    return str(caught.value)


def test_a_dim_the_code_fixes_is_refused_at_the_input_that_names_it():
    method = _method((3, "steps"), dims=(DimPlan("steps", 2, 8, 3),))
    error = explain_dims(_violation(Loop(), method), method, "policy")
    assert error is not None and error.location == "models.policy.methods.forward.inputs[0].shape"
    assert error.message.startswith("dim 'steps' cannot vary: the model's code makes it the constant 3")
    assert "give the inputs the fixed size 3 in place of 'steps'" in error.message


def test_a_narrower_range_is_named_with_the_dims_to_declare():
    method = _method((3, "seq"), dims=(DimPlan("seq", 2, 32, 2),))
    error = explain_dims(_violation(Capped(), method), method, "policy")
    assert error is not None
    assert error.message.startswith("the model takes dim 'seq' only in [2, 16], not the declared [2, 32]; "
                                    "declare { min = 2, max = 16 } for it in dims")


def test_two_dims_that_must_be_equal_are_named():
    method = _method((3, "a"), (3, "b"), dims=(DimPlan("a", 1, 8, 2), DimPlan("b", 1, 8, 2)))
    error = explain_dims(_violation(Pair(), method), method, "policy")
    assert error is not None and error.location == "models.policy.methods.forward.inputs[1].shape"
    assert error.message.startswith("dims 'b' and 'a' must be equal for this model; use 'a' in the shapes in place of 'b'")


def test_a_size_the_model_halves_asks_for_multiple_of_and_exports_with_it():
    method = _method((3, "seq"), dims=(DimPlan("seq", 2, 32, 4),))
    text = _violation(Halves(), method)
    assert [f.expression for f in suggested_fixes(text) or []][-1] == "2*_seq"
    error = explain_dims(text, method, "policy")
    assert error is not None and "declare multiple_of = 2 for it in dims" in error.message
    stepped = _method((3, "seq"), dims=(DimPlan("seq", 4, 32, 4, multiple_of=2),))
    exported = torch.export.export(Halves(), (torch.randn(3, 4),), dynamic_shapes=dynamic_shapes(stepped), strict=False)
    for size in (4, 6, 32):
        x = torch.randn(3, size)
        assert torch.equal(exported.module()(x), Halves()(x))


def test_other_failures_are_left_to_the_caller():
    method = _method((3, "seq"), dims=(DimPlan("seq", 2, 32, 2),))
    assert suggested_fixes("RuntimeError: mat1 and mat2 shapes cannot be multiplied") is None
    assert explain_dims("RuntimeError: mat1 and mat2 shapes cannot be multiplied", method, "policy") is None


MANIFEST = """
[defaults]
out = "out"
backend = "portable"

[models.halves]
factory = "dimsmodels:halves"
dims = { seq = { min = 2, max = 32, example = 4 } }

[models.halves.methods.forward]
inputs = [{ name = "x", shape = [3, "seq"] }]

[models.even]
factory = "dimsmodels:halves"
dims = { seq = { min = 4, max = 32, multiple_of = 2 } }

[models.even.methods.forward]
inputs = [{ name = "x", shape = [3, "seq"] }]

[programs.halves]
model = "halves"

[programs.even]
model = "even"
"""


def test_a_build_names_the_key_and_builds_with_multiple_of(tmp_path: Path):
    (tmp_path / "dimsmodels.py").write_text(
        "import torch\n\n\nclass Halves(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x.reshape(x.shape[0], x.shape[1] // 2, 2).sum(-1)\n\n\ndef halves():\n    return Halves()\n"
    )
    manifest = tmp_path / "dims.toml"
    manifest.write_text(MANIFEST)
    code, document = build_json(manifest, "--cache", tmp_path / "cache", "--keep-going")
    assert code == 2, document
    by_name = {p["name"]: p for p in document["targets"]}
    assert by_name["halves"]["status"] == "failed"
    assert by_name["halves"]["message"].startswith(
        f"{manifest}: models.halves.methods.forward.inputs[0].shape: the model takes dim 'seq' only in multiples of 2")
    even = by_name["even"]
    assert even["status"] == "built", even
    assert sorted(f["sizes"]["seq"] for f in even["figures"]) == [4, 32]  # the example (min) and max


def test_a_dim_a_recurrent_layer_unrolls_names_the_layer_and_says_why():
    """Seen by a user: a GRU's time dim 'cannot vary' without naming the GRU, and a clause about
    tracing a larger example that could not help."""
    from ptebuild.lowering.dims_fit import recurrent_layers

    model = KeywordSpotter()
    method = _method((1, 4, "time"), dims=(DimPlan("time", 2, 101, 101),))
    layers = recurrent_layers(model)
    assert layers == [("gru", "GRU")]
    error = explain_dims(_violation(model, method), method, "kws", recurrent=layers)
    assert error is not None and error.location == "models.kws.methods.forward.inputs[0].shape"
    assert error.message.startswith(
        "dim 'time' cannot vary: the model's GRU 'gru' runs one step per element of the sequence, and torch.export "
        "unrolls those steps into a fixed count (101); give the inputs the fixed size 101 in place of 'time'")
    assert "trace a larger example" not in error.message
    assert recurrent_layers(Loop()) == []
