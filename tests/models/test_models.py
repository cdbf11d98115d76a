"""The model-kind registry (:mod:`ptebuild.models`): every kind declares itself, the manifest and
its schema take each kind's table, and nothing outside ``ptebuild/models`` names a kind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ptebuild.manifest.schema import json_schema
from ptebuild.models import MODEL_KIND_MODULES, get_model_kind, model_kind_names
from ptebuild.models.base import ModelKind

PACKAGE = Path(__file__).resolve().parents[2] / "ptebuild"


@pytest.mark.parametrize("name", model_kind_names())
def test_every_kind_declares_itself(name):
    kind = get_model_kind(name)
    assert isinstance(kind, ModelKind)
    assert kind.name == name
    table = kind.spec_model()
    assert table.model_config.get("extra") == "forbid" and table.model_config.get("frozen")


def test_the_schema_has_every_kinds_table_and_program_options():
    schema = json_schema()
    tables = schema["properties"]["models"]["additionalProperties"]["oneOf"]
    assert [t["$ref"].rsplit("/", 1)[-1] for t in tables] == [get_model_kind(n).spec_model().__name__ for n in model_kind_names()]
    llm = schema["$defs"]["LlmModelSpec"]["properties"]
    assert {"model_class", "params", "checkpoint", "tokenizer", "max_seq_length", "max_context_length",
            "use_kv_cache", "enable_dynamic_shape", "metadata"} <= set(llm)
    xnnpack = next(rule for rule in schema["$defs"]["ProgramSpec"]["allOf"] if rule["if"]["properties"]["backend"]["const"] == "xnnpack")
    options = [ref["$ref"].rsplit("/", 1)[-1] for ref in xnnpack["then"]["properties"]["options"]["anyOf"]]
    assert options == ["XnnpackOptions", "LlmXnnpackOptions"]
    assert {"qmode", "group_size", "embedding_quantize", "dtype_override", "use_sdpa_with_kv_cache",
            "extended_ops"} <= set(schema["$defs"]["LlmXnnpackOptions"]["properties"])


def test_no_module_outside_the_models_package_names_a_kind():
    """A kind is one module and one registration line: the core asks kinds what they are."""
    names = [n for n in MODEL_KIND_MODULES if n != "factory"]  # "factory" is also the factory callable's key
    pattern = re.compile("|".join(re.escape(f'"{n}"') for n in names))
    offenders = [
        str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
        if "models" not in path.relative_to(PACKAGE).parts and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_the_llm_model_classes_are_upstreams():
    """The manifest's model_class values (kept in ptebuild, so that a manifest check imports no
    executorch) are the ones ExecuTorch's LLM export builds from its own definitions."""
    from executorch.examples.models.llama.export_llama_lib import EXECUTORCH_DEFINED_MODELS

    from ptebuild.models.executorch_llm.spec import MODEL_CLASSES

    assert list(MODEL_CLASSES) == [m for m in EXECUTORCH_DEFINED_MODELS if m != "static_llama"]
