"""`ptebuild schema` catches what JSON Schema can: fed every bad manifest of the tests and the
mistakes a newcomer makes, it refuses those it can express; the rest are the checks only the
command line makes, each listed in docs/manifest.md."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from ptebuild.manifest.schema import CLI_ONLY_CHECKS, json_schema
from ptebuild.names import name_problem

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "tests" / "manifests"
VALIDATOR = Draft202012Validator(json_schema())

# Each bad manifest of the tests the schema cannot refuse, with the CLI-only check it needs;
# every other bad manifest (TOML syntax aside) the schema refuses.
CLI_ONLY = {
    "bad-budget-method": "programs.NAME.methods name methods of the model",
    "bad-mm-backend": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-mm-bundle-io": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-mm-quantize": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-mm-params": "a multimodal model's params.json has its family's keys",
    "bad-bundle-case-collision": "names that differ only in case (one file on macOS and Windows)",
    "bad-data-name-case-collision": "names that differ only in case (one file on macOS and Windows)",
    "bad-bundle-glob": "bundles.NAME.programs match declared programs",
    "bad-bundle-unknown-program": "bundles.NAME.programs match declared programs",
    "bad-compile-specs-both": "a key given in both options and compile_specs",
    "bad-dim-min-max": "dims: min <= max, example within [min, max], all multiples of multiple_of (an example of 2 blocks or more)",
    "bad-dim-multiple-of": "dims: min <= max, example within [min, max], all multiples of multiple_of (an example of 2 blocks or more)",
    "bad-dim-multiple-of-min": "dims: min <= max, example within [min, max], all multiples of multiple_of (an example of 2 blocks or more)",
    "bad-dim-unknown": "a shape names a declared dynamic dim",
    "bad-input-nested-dim": "a shape names a declared dynamic dim",
    "bad-factory-missing-module": "the factory's module can be imported",
    "bad-method-unknown": "programs.NAME.methods name methods of the model",
    "bad-openvino-dynamic": "what the backend needs when only [defaults] names it (data_name, fixed shapes)",
    "bad-unknown-model": "programs.NAME.model names a declared model",
    "bad-llm-context": "a language model's max_context_length >= max_seq_length",
    "bad-llm-params-missing": "files the manifest names exist (weights, sources, shim lists, include globs, a language model's params, tokenizer and checkpoint)",
    "bad-llm-bundle-io": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-coreml-dynamic": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-cuda-fp32": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-embedding": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-group-size": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-portable-data-name": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-sdpa-no-kv": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-qmode-4w-xnnpack": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-qmode-4w-portable": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-xnnpack-option": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-token-agreement-factory": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-etrecord": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-vulkan-dynamic": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-openvino-unquantized": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-openvino-dynamic": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-cuda-dynamic": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-adapter": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-backend": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-data-name": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-duplicate": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-half-adapter": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-model-metadata": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-no-forward": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-share-alone": "what a program takes that depends on the kind of the model it names (a language model's options, backend, data_name, bundle_io and etrecord; check.min_token_agreement)",
    "bad-llm-methods-program-methods": "programs.NAME.methods name methods of the model",
    "bad-llm-methods-missing-adapter": "files the manifest names exist (weights, sources, shim lists, include globs, a language model's params, tokenizer and checkpoint)",
}

SMALLEST = """
[models.policy]
factory = "mypolicy:Policy"
dims = { batch = { min = 1, max = 8 } }
[models.policy.methods.forward]
inputs = [{ name = "obs", shape = ["batch", 32] }]
[programs.policy_xnnpack]
model = "policy"
backend = "xnnpack"
data_name = "policy_weights"
"""

# The mistakes of issue 30, each applied to the smallest manifest: (id, old, new, the schema refuses it?)
MISTAKES = [
    ("program-named-CON", "[programs.policy_xnnpack]", "[programs.CON]", True),
    ("program-named-nul-with-extension", "[programs.policy_xnnpack]", "[programs.nul.policy]", True),
    ("data-name-COM1", 'data_name = "policy_weights"', 'data_name = "COM1"', True),
    ("factory-without-colon", 'factory = "mypolicy:Policy"', 'factory = "mypolicy.Policy"', True),
    ("dims-min-above-max", "min = 1, max = 8", "min = 9, max = 8", False),
    ("undeclared-model", 'model = "policy"', 'model = "polcy"', False),
    ("unknown-dim-name", '["batch", 32]', '["btach", 32]', False),
]


def errors(document: dict) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in VALIDATOR.iter_errors(document)]


def test_the_schema_is_valid_json_schema():
    Draft202012Validator.check_schema(json_schema())


# tests/plugins/ holds packages (pyproject.toml) and a manifest of the demo plug-in's backend, which
# its own tests install into an environment of theirs: not this one's schema.
@pytest.mark.parametrize("path", sorted({*ROOT.glob("manifests/*.toml"), *ROOT.glob("tests/**/*.toml")}
                                        - set(MANIFESTS.glob("bad-*.toml")) - set(ROOT.glob("tests/plugins/**/*.toml"))),
                         ids=lambda p: p.name)
def test_every_manifest_the_cli_builds_is_valid(path):
    assert errors(tomllib.loads(path.read_text())) == []


BAD = sorted(p for p in MANIFESTS.glob("bad-*.toml") if p.stem != "bad-toml-syntax")


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_each_bad_manifest_is_refused_by_the_schema_or_needs_a_listed_cli_check(path):
    found = errors(tomllib.loads(path.read_text()))
    if path.stem in CLI_ONLY:
        assert found == [], f"the schema refuses {path.stem} now: drop it from CLI_ONLY"
        assert CLI_ONLY[path.stem] in CLI_ONLY_CHECKS
    else:
        assert found, f"the schema accepts {path.stem}"


@pytest.mark.parametrize(("old", "new", "refused"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_the_issues_mistakes(old, new, refused):
    assert errors(tomllib.loads(SMALLEST)) == []
    assert SMALLEST.count(old) == 1
    assert bool(errors(tomllib.loads(SMALLEST.replace(old, new)))) is refused


def test_docs_list_every_check_only_the_cli_makes():
    text = (ROOT / "docs" / "manifest.md").read_text()
    for check in CLI_ONLY_CHECKS:
        assert f"- {check}" in text, check


@given(st.text(alphabet="abcCoOnNuUlLpPtT0123456789_.- /", min_size=1, max_size=12))
def test_names_the_schema_accepts_are_the_names_ptebuild_accepts(name):
    for extension, where in ((".pte", "programs"), (".tar.gz", "bundles"), (".lib", "shims")):
        document = {where: {name: {}}}
        name_errors = [e for e in VALIDATOR.iter_errors(document) if list(e.absolute_path) == [where] and e.validator != "minProperties"]
        schema_says = not any(e.validator in ("propertyNames", "pattern", "not", "maxLength", "minLength") for e in name_errors)
        assert schema_says == (name_problem(name, extension=extension) is None), (name, extension, name_errors)
