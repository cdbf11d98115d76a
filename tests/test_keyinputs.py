"""The typed names of a key's inputs (ptebuild.keyinputs): each text form parses to its kind and
writes back unchanged, the selections by kind, and the words ``--explain`` and the lockfile use
for an input and for its change."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptebuild import keyinputs
from ptebuild.keyinputs import InputKind, InputName, change_words, describe, describe_change

SHA_A = "a" * 64
SHA_B = "b" * 64

# The module docstring's table: text form -> (kind, name within the kind).
TEXT_FORMS = [
    ("schema", InputKind.SCHEMA, ""),
    ("manifest.model.kwargs.width", InputKind.MANIFEST, "model.kwargs.width"),
    ("manifest.program.backend", InputKind.MANIFEST, "program.backend"),
    ("source:layers/blocks.py", InputKind.SOURCE, "layers/blocks.py"),
    ("weights:w/policy.safetensors", InputKind.WEIGHTS, "w/policy.safetensors"),
    ("samples:forward.npz", InputKind.SAMPLES, "forward.npz"),
    ("toolchain.torch", InputKind.TOOLCHAIN, "torch"),
    ("toolchain.ptebuild-code", InputKind.TOOLCHAIN, "ptebuild-code"),
    ("shims.abi", InputKind.SHIMS, "abi"),
    ("member:policy_a", InputKind.MEMBER, "policy_a"),
    ("workaround:conv1d-bias", InputKind.OTHER, "workaround:conv1d-bias"),
    ("something-else", InputKind.OTHER, "something-else"),
    ("schemas", InputKind.OTHER, "schemas"),  # only the exact word is the schema
    ("source", InputKind.OTHER, "source"),  # a prefix needs its separator
]


@pytest.mark.parametrize(("text", "kind", "name"), TEXT_FORMS, ids=[t for t, _, _ in TEXT_FORMS])
def test_each_text_form_parses_to_its_kind_and_writes_back(text, kind, name):
    parsed = InputName.parse(text)
    assert (parsed.kind, parsed.name) == (kind, name)
    assert str(parsed) == text


@given(st.text())
def test_any_text_round_trips(text):
    assert str(InputName.parse(text)) == text


@given(st.sampled_from([k for k in InputKind if k not in (InputKind.SCHEMA, InputKind.OTHER)]), st.text())
def test_a_name_of_a_prefixed_kind_round_trips(kind, name):
    written = InputName(kind, name)
    assert InputName.parse(str(written)) == written


@pytest.mark.parametrize(("build", "kind"), [
    (keyinputs.source, InputKind.SOURCE),
    (keyinputs.weights, InputKind.WEIGHTS),
    (keyinputs.samples, InputKind.SAMPLES),
    (keyinputs.toolchain, InputKind.TOOLCHAIN),
    (keyinputs.manifest, InputKind.MANIFEST),
    (keyinputs.shims, InputKind.SHIMS),
    (keyinputs.member, InputKind.MEMBER),
], ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_writers_make_names_of_their_kind(build, kind):
    text = build("x.y")
    assert InputName.parse(text) == InputName(kind, "x.y")


def test_a_workaround_is_an_other_input_named_with_its_prefix():
    assert keyinputs.workaround("conv1d-bias") == "workaround:conv1d-bias"
    assert InputName.parse("workaround:conv1d-bias").kind is InputKind.OTHER


@pytest.mark.parametrize(("text", "digest"), [
    ("source:a.py", True),
    ("weights:w.bin", True),
    ("samples:s.npz", True),
    ("member:policy", True),
    ("toolchain.ptebuild-code", True),
    ("toolchain.merge-code", True),
    ("toolchain.torch", False),
    ("toolchain.platform", False),
    ("manifest.model.seed", False),
    ("shims.abi", False),
    ("schema", False),
    ("workaround:x", False),
])
def test_which_values_are_file_digests(text, digest):
    assert InputName.parse(text).is_digest is digest


def test_names_sort_by_kind_then_name():
    names = [InputName.parse(t) for t in ("toolchain.torch", "source:b.py", "source:a.py", "schema")]
    assert [str(n) for n in sorted(names)] == ["schema", "source:a.py", "source:b.py", "toolchain.torch"]


INPUTS = {
    "schema": "3",
    "manifest.model.seed": "1",
    "source:b.py": SHA_B,
    "source:a.py": SHA_A,
    "weights:w.bin": SHA_A,
    "samples:s.npz": SHA_B,
    "member:other": SHA_A,
    "toolchain.torch": "2.11.0",
    "toolchain.ptebuild-code": SHA_B,
    "workaround:x": "applied",
}


def test_of_kind_names_inputs_within_their_kind():
    assert keyinputs.of_kind(INPUTS, InputKind.SOURCE) == {"a.py": SHA_A, "b.py": SHA_B}
    assert keyinputs.of_kind(INPUTS, InputKind.TOOLCHAIN, InputKind.MANIFEST) == {
        "torch": "2.11.0", "ptebuild-code": SHA_B, "model.seed": "1"}
    assert keyinputs.of_kind(INPUTS) == {}


def test_files_are_the_sources_weights_and_samples_sorted():
    assert keyinputs.files(INPUTS) == [("a.py", SHA_A), ("b.py", SHA_B), ("s.npz", SHA_B), ("w.bin", SHA_A)]


def test_without_drops_kinds_but_keeps_what_is_named():
    left = keyinputs.without(INPUTS, [InputKind.TOOLCHAIN, InputKind.OTHER], keep=["toolchain.ptebuild-code"])
    assert set(left) == set(INPUTS) - {"toolchain.torch", "workaround:x"}
    assert left["toolchain.ptebuild-code"] == SHA_B
    assert keyinputs.without(INPUTS, []) == INPUTS


@pytest.mark.parametrize(("text", "words"), [
    ("source:layers/blocks.py", "source file layers/blocks.py"),
    ("weights:w.bin", "weights file w.bin"),
    ("samples:forward.npz", "samples file forward.npz"),
    ("member:policy_a", "weights file of policy_a"),
    ("manifest.model.kwargs.width", "manifest entry model.kwargs.width"),
    ("toolchain.torch", "torch version"),
    ("toolchain.platform", "platform"),
    ("toolchain.ptebuild-code", "ptebuild's lowering code"),
    ("toolchain.merge-code", "ptebuild's merge code"),
    ("shims.abi", "shim library option abi"),
    ("workaround:conv1d-bias", "toolchain workaround conv1d-bias"),
    ("schema", "key schema"),
    ("something-else", "input something-else"),
])
def test_describe(text, words):
    assert describe(text) == words


@pytest.mark.parametrize(("text", "words"), [
    ("manifest.model.kwargs.width", "manifest field models.mlp.kwargs.width"),
    ("manifest.program.backend", "manifest field programs.policy.backend"),
    ("manifest.model", "manifest entry models.mlp"),
    ("manifest.program", "manifest entry programs.policy"),
])
def test_describe_names_the_manifest_tables_when_told_them(text, words):
    assert describe(text, model="mlp", program="policy") == words


@pytest.mark.parametrize(("text", "before", "after", "detail", "line"), [
    ("toolchain.torch", "2.10.0", "2.11.0", False, "torch version changed (2.10.0 -> 2.11.0)"),
    ("toolchain.torch", "2.10.0", "2.11.0", True, "torch version changed (2.10.0 -> 2.11.0)"),
    ("source:a.py", SHA_A, SHA_B, False, "source file a.py changed"),
    ("source:a.py", SHA_A, SHA_B, True, f"source file a.py changed (sha256 {SHA_A[:12]}... -> {SHA_B[:12]}...)"),
    ("toolchain.ptebuild-code", SHA_A, SHA_B, False, "ptebuild's lowering code changed"),
    ("source:a.py", None, SHA_B, False, "source file a.py added"),
    ("source:a.py", None, SHA_B, True, "source file a.py is new"),
    ("source:a.py", SHA_A, None, False, "source file a.py removed"),
    ("source:a.py", SHA_A, None, True, "source file a.py is no longer used"),
], ids=["plain", "plain-detail", "digest", "digest-detail", "code", "added", "new", "removed", "no-longer-used"])
def test_describe_change(text, before, after, detail, line):
    assert describe_change(text, before, after, detail=detail) == line


def test_a_long_value_is_cut_in_the_lockfile_messages_only():
    before, after = "x" * 61, "y" * 60
    assert change_words(before, after, digest=False, detail=True) == f"changed ({'x' * 57}... -> {after})"
    assert change_words(before, after, digest=False) == f"changed ({before} -> {after})"


def test_describe_change_names_the_manifest_tables():
    line = describe_change("manifest.model.seed", "0", "1", model="mlp", program="policy", detail=True)
    assert line == "manifest field models.mlp.seed changed (0 -> 1)"
