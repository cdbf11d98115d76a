"""The ``factory`` kind's manifest table (:mod:`ptebuild.models.factory.spec`), validated by itself.

Dynamic dims trace at a size torch.export does not specialise (2 or more, 2 blocks of
``multiple_of`` or more) and say which multiple to give; an input is one kind (tensor, scalar or
container) and dumps as inputs always did where it is a tensor, so that old programs keep their
keys; a method without samples dumps without them; a model table drops its ``kind``, refuses
weights options without weights and keys that are not dotted paths. The located one-line
messages of whole manifests are ``tests/manifest/test_load.py``'s.
"""

from __future__ import annotations

import re
from typing import get_args

import pytest
from pydantic import ValidationError

from ptebuild.models.factory.spec import DTYPES, DType, DynamicDim, InputSpec, MethodSpec, ModelSpec


def refused(model, data: dict, message: str) -> None:
    """``data`` is refused by ``model`` with ``message`` among its errors."""
    with pytest.raises(ValidationError, match=re.escape(message)):
        model.model_validate(data)


@pytest.mark.parametrize(("dim", "size"), [
    ({"max": 8}, 2),
    ({"min": 1, "max": 1}, 1),
    ({"min": 3, "max": 8}, 3),
    ({"min": 1, "max": 8, "example": 5}, 5),
    ({"min": 8, "max": 64, "multiple_of": 4}, 8),
    ({"min": 12, "max": 64, "multiple_of": 4}, 12),
    ({"min": 4, "max": 4, "multiple_of": 4}, 4),
], ids=["default-2", "one-size", "min-above-2", "example", "two-blocks", "min-above-two-blocks", "one-block-one-size"])
def test_a_dims_example_size(dim, size):
    assert DynamicDim.model_validate(dim).example_size() == size


@pytest.mark.parametrize(("dim", "message"), [
    ({"min": 1, "max": 8, "example": 9}, "example (9) is outside [min, max] = [1, 8]; give one inside"),
    ({"min": 4, "max": 4, "multiple_of": 4, "example": 8}, "example (8) is outside [min, max] = [4, 4]; give one inside"),
    ({"min": 8, "max": 30, "multiple_of": 4}, "max (30) is not a multiple of multiple_of (4); give 28 or 32"),
    ({"min": 2, "max": 32, "multiple_of": 4}, "min (2) is not a multiple of multiple_of (4); give 4"),
    ({"min": 8, "max": 32, "example": 10, "multiple_of": 4}, "example (10) is not a multiple of multiple_of (4); give 8 or 12"),
    ({"min": 4, "max": 8, "multiple_of": 4}, "min (4) is one block of multiple_of (4): torch.export takes a dim in steps from two "
                                             "steps on (it fixes a number of steps of 1); give min >= 8"),
    ({"min": 0, "max": 8}, "greater than or equal to 1"),
    ({"min": 1, "max": 8, "example": 1}, "greater than or equal to 2"),
], ids=["example-outside", "example-outside-one-size", "max-not-multiple", "min-below-one-block", "example-not-multiple",
        "min-one-block", "min-zero", "example-one"])
def test_a_dims_bounds_are_checked_with_the_fix(dim, message):
    refused(DynamicDim, dim, message)


@pytest.mark.parametrize(("data", "kind"), [
    ({"name": "x", "shape": ["batch", 6]}, "tensor"),
    ({"name": "flag", "value": True}, "scalar"),
    ({"name": "state", "items": [{"name": "h", "shape": [1, 4]}, {"name": "c", "shape": [1, 4]}]}, "tuple"),
    ({"name": "state", "container": "list", "items": [{"name": "h", "shape": [1, 4]}]}, "list"),
    ({"name": "obs", "container": "dict", "items": [{"name": "depth", "shape": [2]}, {"name": "scale", "value": 0.5}]}, "dict"),
])
def test_an_inputs_kind(data, kind):
    assert InputSpec.model_validate(data).kind == kind


def test_a_tensor_input_dumps_as_inputs_always_did():
    """Its program's key hashes this dump: the container keys added later are absent where unset."""
    tensor = InputSpec.model_validate({"name": "tokens", "shape": ["batch"], "dtype": "int64", "low": 0, "high": 10})
    assert tensor.model_dump(mode="json") == {"name": "tokens", "shape": ["batch"], "dtype": "int64", "low": 0.0, "high": 10.0}
    nested = InputSpec.model_validate({"name": "s", "container": "list", "items": [{"name": "h", "shape": [1]}, {"name": "k", "value": 3}]})
    dumped = nested.model_dump(mode="json")
    assert dumped["container"] == "list" and "value" not in dumped and "shape" in dumped
    assert dumped["items"] == [{"name": "h", "shape": [1], "dtype": "float32", "low": None, "high": None},
                               {"name": "k", "shape": None, "dtype": "float32", "low": None, "high": None, "value": 3}]


@pytest.mark.parametrize(("data", "message"), [
    ({"name": "x"}, "input 'x': give one of shape (a tensor), items (a tuple, list or dict of inputs) or value (a scalar)"),
    ({"name": "x", "shape": [1], "items": [{"name": "y", "shape": [1]}]}, ", not shape and items"),
    ({"name": "flag", "value": True, "dtype": "bool"}, "input 'flag': dtype apply to a tensor (an input with a shape); remove them"),
    ({"name": "s", "items": [{"name": "h", "shape": [1]}], "low": 0, "high": 1},
     "input 's': high, low apply to a tensor (an input with a shape); remove them"),
    ({"name": "s", "items": [{"name": "h", "shape": [1]}, {"name": "h", "shape": [2]}]}, "input 's': items name 'h' twice"),
    ({"name": "x", "shape": [1], "container": "dict"}, "input 'x': container needs items; add items = [...]"),
    ({"name": "2x", "shape": [1]}, "input name '2x' is not a Python identifier"),
    ({"name": "x", "shape": [-1]}, "greater than or equal to 0"),
    ({"name": "k", "value": "3"}, "value"),
    ({"name": "x", "shape": [1], "dtype": "complex64"}, "dtype"),
], ids=["no-kind", "two-kinds", "dtype-on-scalar", "bounds-on-container", "item-twice", "container-without-items",
        "not-identifier", "negative-size", "value-as-text", "unknown-dtype"])
def test_a_bad_input_is_refused(data, message):
    refused(InputSpec, data, message)


def test_a_scalar_keeps_its_type():
    """The program is exported for this value: ``true`` must not become ``1``, nor ``1`` ``1.0``."""
    assert InputSpec.model_validate({"name": "f", "value": True}).value is True
    assert type(InputSpec.model_validate({"name": "n", "value": 1}).value) is int
    assert type(InputSpec.model_validate({"name": "r", "value": 0.5}).value) is float


def test_a_method_dumps_without_samples_unless_it_has_some():
    plain = MethodSpec.model_validate({"inputs": [{"name": "x", "shape": [1]}]})
    assert "samples" not in plain.model_dump()
    assert MethodSpec.model_validate({"inputs": [{"name": "x", "shape": [1]}], "samples": "data/x.pt"}).model_dump()["samples"] == "data/x.pt"
    refused(MethodSpec, {"inputs": [{"name": "x", "shape": [1]}], "samples": "  "}, "samples is empty")
    refused(MethodSpec, {"inputs": []}, "at least 1 item")


MODEL = {"factory": "robot.policy:make", "methods": {"forward": {"inputs": [{"name": "obs", "shape": [1, 32]}]}}}


def test_a_model_table_dumps_without_its_kind():
    """``kind = "factory"`` is the default: writing it does not change the programs' keys."""
    assert ModelSpec.model_validate({**MODEL, "kind": "factory"}).model_dump() == ModelSpec.model_validate(MODEL).model_dump()
    assert "kind" not in ModelSpec.model_validate(MODEL).model_dump()


@pytest.mark.parametrize("factory", ["robot.policy:make", "policy:Policy", "_p1.m2:Class.create"])
def test_factories_of_the_form_module_colon_callable(factory):
    assert ModelSpec.model_validate({**MODEL, "factory": factory}).factory == factory


@pytest.mark.parametrize(("changes", "message"), [
    ({"factory": "robot.policy.make"}, "factory 'robot.policy.make' is not of the form 'package.module:callable'"),
    ({"factory": "robot/policy:make"}, "is not of the form 'package.module:callable'"),
    ({"weights_key": "model"}, "weights_key names an entry of the weights file: set weights too, or drop weights_key"),
    ({"weights_prefix": "model."}, "weights_prefix is stripped from the weights file's names: set weights too"),
    ({"weights": "w.pt", "weights_key": "state..model"}, "weights_key"),
    ({"weights": "w.pt", "weights_prefix": "model. "}, "weights_prefix"),
    ({"methods": {}}, "at least 1 item"),
    ({"methods": {"forward": {"function": "__call__", "inputs": [{"name": "x", "shape": [1]}]}}},
     "function '__call__' is a special method; name a method of the model"),
    ({"methods": {"fwd": {"function": "run-it", "inputs": [{"name": "x", "shape": [1]}]}}},
     "function 'run-it' is not a Python identifier; name a method of the model"),
    ({"wieghts": "w.pt"}, "Extra inputs are not permitted"),
], ids=["dotted", "slash", "key-without-weights", "prefix-without-weights", "empty-key-segment", "prefix-with-space",
        "no-methods", "special-function", "function-not-identifier", "unknown-key"])
def test_a_bad_model_table_is_refused(changes, message):
    refused(ModelSpec, {**MODEL, **changes}, message)


def test_weights_options_with_weights():
    spec = ModelSpec.model_validate({**MODEL, "weights": "ckpt.pt", "weights_key": "state.model", "weights_prefix": "module."})
    assert (spec.weights, spec.weights_key, spec.weights_prefix) == ("ckpt.pt", "state.model", "module.")


def test_tables_are_frozen():
    spec = ModelSpec.model_validate(MODEL)
    with pytest.raises(ValidationError, match="frozen"):
        spec.seed = 3  # type: ignore[misc]


def test_the_dtypes_are_the_literals():
    assert DTYPES == get_args(DType)
    assert {"float32", "bfloat16", "int64", "bool"} <= set(DTYPES)
