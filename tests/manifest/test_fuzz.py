"""Fuzzing the manifest: values of any TOML type, at any key a user may write, for every backend of
the registry. Reading the manifest either succeeds or fails with one located line (a ManifestError:
exit 2), never another exception (the CLI's "internal error", exit 1). Found this way before: a Core
ML ``minimum_deployment_target`` given as a list or a table ("internal error: TypeError:
unhashable type")."""

from __future__ import annotations

import datetime
import re
import shutil
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ptebuild.backends import backend_names, get_backend
from ptebuild.builder.keys import program_inputs
from ptebuild.errors import ManifestError
from ptebuild.hashing import hash_file
from ptebuild.manifest import load_manifest

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"

_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_ABC0123456789-.", min_size=1, max_size=12)
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=16),
    st.sampled_from(["", "iOS17", "CPU", "none", "int8", "float16", "x", "batch", "linux", "windows", "ON", "-1", "1e9",
                     "tinymodels", "tinymodels/*.py", "[", "**", "../x", "/etc/passwd", "a\x00b", "tinymodels/tiny.py",
                     ".", "./", " ", "a" * 300]),
    st.dates(),
    st.times(),
    st.datetimes(timezones=st.just(datetime.UTC) | st.none()),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEY, inner, max_size=3), max_leaves=8)
"""Any TOML value: scalars, arrays (of mixed types too, as TOML 1.0 allows) and tables."""

CHECK_KEYS = ["atol", "min_cosine", "enabled"]
INPUT_KEYS = ["name", "shape", "dtype", "low", "high", "items", "container", "value"]
PROGRAM_KEYS = ["data_name", "bundle_io", "methods", "model", "backend", "options", "compile_specs", "check"]
MODEL_KEYS = ["seed", "kwargs", "weights", "sources", "dims", "factory"]


def base(backend: str) -> dict:
    """A valid manifest with one program for ``backend`` (static shapes; a data name where the
    backend needs one, none where it refuses one)."""
    spec = get_backend(backend)
    program: dict = {"model": "tiny", "backend": backend}
    if spec.requires_data_name:
        program["data_name"] = "tiny_weights"
    return {
        "defaults": {"out": "out"},
        "models": {"tiny": {"factory": "tinymodels.tiny:make_tiny", "kwargs": {"width": 16}, "seed": 1,
                            "methods": {"forward": {"inputs": [{"name": "x", "shape": [2, 6]}]}}}},
        "programs": {"p": program},
    }


def places(backend: str) -> st.SearchStrategy[tuple[str, ...]]:
    """Where a fuzzed value goes: every option and compile spec of the backend (from its options
    model), the check, an input, the program and the model, and keys nobody declared."""
    options = sorted(get_backend(backend).options_model.model_fields)
    option_key = st.sampled_from(options) | _KEY if options else _KEY
    return st.one_of(
        st.tuples(st.just("programs"), st.just("p"), st.sampled_from(["options", "compile_specs"]), option_key),
        st.tuples(st.just("defaults"), st.sampled_from(["options", "compile_specs"]), st.just(backend), option_key),
        st.tuples(st.just("defaults"), st.sampled_from(["options", "compile_specs"]), st.just(backend)),
        st.tuples(st.just("programs"), st.just("p"), st.just("check"), st.sampled_from(CHECK_KEYS) | _KEY),
        st.tuples(st.just("defaults"), st.just("check"), st.sampled_from(CHECK_KEYS)),
        st.tuples(st.just("models"), st.just("tiny"), st.just("methods"), st.just("forward"), st.just("inputs"), st.just("0"),
                  st.sampled_from(INPUT_KEYS) | _KEY),
        st.tuples(st.just("models"), st.just("tiny"), st.just("methods"), st.just("forward"), st.just("inputs")),
        st.tuples(st.just("programs"), st.just("p"), st.sampled_from(PROGRAM_KEYS) | _KEY),
        st.tuples(st.just("models"), st.just("tiny"), st.sampled_from(MODEL_KEYS) | _KEY),
    )


def put(manifest: dict, where: tuple[str, ...], value: object) -> None:
    """Set ``value`` at ``where``; a table or list on the way that is not there (or was fuzzed into
    another type) becomes a table; ``"0"`` indexes a list."""
    table: dict | list = manifest
    for index, part in enumerate(where):
        last = index == len(where) - 1
        if isinstance(table, list):
            if not (part.isdigit() and int(part) < len(table)):
                return  # the list was fuzzed shorter: nothing to edit
            if last:
                table[int(part)] = value
                return
            if not isinstance(table[int(part)], dict | list):
                table[int(part)] = {}
            table = table[int(part)]
            continue
        if last:
            table[part] = value
            return
        if not isinstance(table.get(part), dict | list):
            table[part] = {}
        table = table[part]


LOCATED = re.compile(r'(?P<file>[^:]+): (?P<where>[A-Za-z0-9_\-".\[\]]+): \S')
"""``manifest.toml: programs.p.options.quantize: ...``: the file, then the dotted key."""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(MANIFESTS / "tinymodels", folder / "tinymodels", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def read_fuzzed(folder: Path, manifest: dict) -> None:
    path = folder / "fuzz.toml"
    path.write_text(tomli_w.dumps(manifest))
    try:
        plan = load_manifest(path)
        for program in plan.programs:  # what the builder reads before lowering: weights, sources
            program_inputs(program, plan, hash_file)
    except ManifestError as exc:
        line = str(exc)
        assert "\n" not in line, line
        assert LOCATED.match(line) and line.startswith(f"{path}: "), f"not located: {line}"


FUZZED = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.mark.parametrize("backend", backend_names())
def test_any_value_anywhere_is_a_located_manifest_error_or_fine(backend, folder):
    @FUZZED
    @given(st.lists(st.tuples(places(backend), VALUES), min_size=1, max_size=3))
    def fuzz(edits):
        manifest = base(backend)
        for where, value in edits:
            put(manifest, where, value)
        read_fuzzed(folder, manifest)

    fuzz()


@pytest.mark.slow
@pytest.mark.parametrize("backend", backend_names())
def test_any_value_anywhere_many_random_draws(backend, folder):
    @settings(max_examples=3000, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(places(backend), VALUES), min_size=1, max_size=4))
    def fuzz(edits):
        manifest = base(backend)
        for where, value in edits:
            put(manifest, where, value)
        read_fuzzed(folder, manifest)

    fuzz()
