"""`ptebuild inspect` on real built files of the tiny project (tests/manifests/tiny.toml)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "release"))
from release_build import built_tiny

from ptebuild import cli
from ptebuild.errors import FormatError
from ptebuild.runtime import read_ptd, read_pte
from ptebuild.runtime.inspect import PtdInspection, PteInspection, describe, inspect


@pytest.fixture(scope="session")
def out(tmp_path_factory) -> Path:
    return built_tiny(tmp_path_factory).parent / "out"


@pytest.fixture
def run(capsys):
    def call(*argv) -> tuple[int, str, str]:
        code = cli.main([*map(str, argv)])
        stdout, stderr = capsys.readouterr()
        assert "Traceback" not in stderr
        return code, stdout, stderr

    return call


def test_an_xnnpack_program(out):
    result = inspect(out / "tiny_xnnpack.pte")
    assert isinstance(result, PteInspection) and result.kind == "pte"
    assert [m.name for m in result.methods] == ["forward", "score"]
    score = result.method("score")
    assert [(s.type, s.dtype, s.sizes, s.dynamism) for s in score.inputs] == [
        ("Tensor", "float32", (4, 6), "dynamic-bound"),
        ("Tensor", "int64", (4,), "dynamic-bound"),
        ("Tensor", "bool", (4,), "dynamic-bound"),
    ]
    assert [(s.dtype, s.sizes) for s in score.outputs] == [("float32", (4, 3))]
    forward = result.method("forward")
    [delegate] = forward.delegates
    assert (delegate.backend, delegate.location) == ("XnnpackBackend", "segment")
    segment = result.segments[delegate.data_index]
    assert (segment.offset, segment.size, segment.sha256) == (delegate.offset, delegate.size, delegate.sha256)
    assert segment.used_by == ("method 'forward' delegate 0 (XnnpackBackend)",)
    assert forward.operators == ()
    program = read_pte(out / "tiny_xnnpack.pte")
    assert set(result.needs) == program.required_keys
    assert set(delegate.keys) | set(result.method("score").delegates[0].keys) <= program.delegate_keys
    assert result.header["extended_header"] and result.header["segment_base_offset"] > 0
    assert result.size == (out / "tiny_xnnpack.pte").stat().st_size


def test_a_portable_program(out):
    result = inspect(out / "tiny_portable.pte")
    forward = result.method("forward")
    assert "aten::addmm.out" in forward.operators and forward.delegates == ()
    assert forward.instructions > 0 and forward.values > len(forward.inputs)
    assert set(result.needs) == read_pte(out / "tiny_portable.pte").external_tensor_keys
    assert all("@sha256:" in key for key in result.needs)


def test_a_data_file(out):
    result = inspect(out / "tiny_portable_weights.ptd")
    assert isinstance(result, PtdInspection) and result.kind == "ptd"
    ptd = read_ptd(out / "tiny_portable_weights.ptd")
    assert {k.key: k.size for k in result.keys} == {k: e.size for k, e in ptd.entries.items()}
    for key in result.keys:
        assert key.key.endswith("@sha256:" + key.sha256)  # the digest matches the key's promise


def test_cli_text_and_json(out, run):
    code, text, _ = run("inspect", out / "tiny_xnnpack.pte")
    assert code == 0
    lines = text.splitlines()
    assert lines[0] == f"{out / 'tiny_xnnpack.pte'}: ExecuTorch program (ET12), {(out / 'tiny_xnnpack.pte').stat().st_size} bytes, version 0"
    assert "  inputs:  float32[4, 6] (dynamic-bound), int64[4] (dynamic-bound), bool[4] (dynamic-bound)" in lines
    assert any(line.startswith("  delegate 0: XnnpackBackend, segment ") for line in lines)
    assert lines == describe(inspect(out / "tiny_xnnpack.pte"))
    code, text, _ = run("inspect", out / "tiny_xnnpack_weights.ptd", "--json")
    document = json.loads(text)
    assert code == 0 and document["kind"] == "ptd" and len(document["keys"]) == 7


def test_not_a_pte_or_ptd_is_one_line_exit_2(out, run, tmp_path):
    code, text, err = run("inspect", out / "ptebuild.json")
    assert code == 2 and text == ""
    assert err.startswith(f"error: {out / 'ptebuild.json'}: neither a .pte nor a .ptd: identifier ") and err.count("\n") == 1
    code, _, err = run("inspect", tmp_path / "gone.pte")
    assert (code, err) == (2, f"error: {tmp_path / 'gone.pte'}: cannot read: No such file or directory\n")


@pytest.mark.parametrize("name", ["tiny_xnnpack.pte", "tiny_portable.pte", "tiny_xnnpack_weights.ptd"])
def test_every_truncation_is_a_format_error(out, tmp_path, name):
    data = (out / name).read_bytes()
    cut = tmp_path / name
    for length in range(8, len(data), max(1, len(data) // 97)):
        cut.write_bytes(data[:length])
        with pytest.raises(FormatError):
            inspect(cut)
