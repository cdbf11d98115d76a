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
from ptebuild.runtime.declared import declared_program
from ptebuild.runtime.inspect import PtdInspection, PteInspection, describe, inspect
from ptebuild.sizes import format_size


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
    code, text, _ = run("inspect", out / "tiny_xnnpack.pte", "--full")
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
    assert (code, err) == (2, f"error: {tmp_path / 'gone.pte'}: cannot read: No such file or directory; give the path of a .pte or .ptd\n")


@pytest.mark.parametrize("name", ["tiny_xnnpack.pte", "tiny_portable.pte", "tiny_xnnpack_weights.ptd"])
def test_every_truncation_is_a_format_error(out, tmp_path, name):
    data = (out / name).read_bytes()
    cut = tmp_path / name
    for length in range(8, len(data), max(1, len(data) // 97)):
        cut.write_bytes(data[:length])
        with pytest.raises(FormatError):
            inspect(cut)


def test_the_default_is_a_summary_with_named_inputs_and_dims_as_ranges(out, run, tmp_path):
    """A few lines a person reads: each method with the manifest's input names and its dynamic
    dims as ranges (the build record beside the file declares them), delegation, sizes, weights."""
    code, text, _ = run("inspect", out / "tiny_xnnpack.pte")
    lines = text.splitlines()
    assert code == 0 and len(lines) <= 10
    assert lines[0] == (f"{out / 'tiny_xnnpack.pte'}: ExecuTorch program, {format_size((out / 'tiny_xnnpack.pte').stat().st_size)}, 2 methods, "
                        "program tiny_xnnpack (per ptebuild.json)")
    record = json.loads((out / "ptebuild.json").read_text())["targets"]["tiny_xnnpack"]["insight"]["delegation"]
    fractions = {m: f"{100 * d['fraction']:.1f}%" for m, d in record["methods"].items()}  # the build table's figure
    assert lines[1:5] == [
        "  forward(x: float32[batch, 6]) -> float32 up to [4, 3]",
        f"    batch 1..4; delegated: {fractions['forward']} of its operators, in 1 of 1 calls (XnnpackBackend)",
        "  score(x: float32[batch, 6], tokens: int64[batch], mask: bool[batch]) -> float32 up to [4, 3]",
        f"    batch 1..4; delegated: {fractions['score']} of its operators, in 1 of 5 calls (XnnpackBackend)",
    ]
    rest = lines[5:]  # the figures: operators left to kernels (score's), size, planned memory, weights
    assert [line.split(":")[0] for line in rest[:-1]] == ["left to kernels in score", "size", "planned memory", "weights"]
    assert " delegate XnnpackBackend " in rest[1] and rest[2].startswith("planned memory: forward ")
    ptd = (out / "tiny_xnnpack_weights.ptd").stat().st_size
    assert rest[3] == f"weights: 7 keys needed from tiny_xnnpack_weights.ptd ({format_size(ptd)}); 0 tensors or blobs inside the .pte"
    assert "dynamic-bound" not in text and "segment" not in text.replace("every segment", "")
    # A copy away from its record is described by what the .pte alone knows: upper bounds.
    (tmp_path / "alone.pte").write_bytes((out / "tiny_xnnpack.pte").read_bytes())
    code, text, _ = run("inspect", tmp_path / "alone.pte")
    assert code == 0 and "  forward(float32 up to [4, 6]) -> float32 up to [4, 3]" in text.splitlines()
    code, text, _ = run("inspect", out / "tiny_xnnpack_weights.ptd")
    assert text.splitlines()[:2] == [
        f"{out / 'tiny_xnnpack_weights.ptd'}: ExecuTorch data file, {format_size(ptd)}, weights of tiny_xnnpack (per ptebuild.json)",
        f"weights: 7 keys, {format_size(sum(k.size for k in inspect(out / 'tiny_xnnpack_weights.ptd').keys))}",
    ]


def test_a_file_the_record_does_not_name_with_its_bytes_is_not_described_by_it(out, tmp_path):
    import shutil

    folder = tmp_path / "out"
    shutil.copytree(out, folder)
    assert declared_program(folder / "tiny_portable.pte").programs == ("tiny_portable",)
    (folder / "tiny_portable.pte").write_bytes((out / "tiny_xnnpack.pte").read_bytes())
    assert declared_program(folder / "tiny_portable.pte") is None
    (folder / "ptebuild.json").write_text("{")
    assert declared_program(folder / "tiny_xnnpack.pte") is None


def test_the_size_line_counts_a_segment_that_delegate_calls_share_once(tmp_path, run):
    """Seen by a user: a GRU's 101 XNNPACK calls share one 2,112-byte payload segment, and inspect
    counted it per call ('295.9 KiB: 212.2 KiB delegate payloads, 111.6 KiB weights inside'): parts
    larger than the file. The size line is the build record's split, whose parts add up to the file."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from ptebuild.runtime.pte_insight import pte_split

    class Same(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0

    exported = torch.export.export(Same(), (torch.randn(2, 8),))
    # three methods, one payload: ExecuTorch writes byte-identical delegate data once
    program = to_edge_transform_and_lower({"a": exported, "b": exported, "c": exported},
                                          partitioner=[XnnpackPartitioner()]).to_executorch()
    path = tmp_path / "shared.pte"
    path.write_bytes(program.buffer)
    inspected = inspect(path)
    payload_uses = [d.size for m in inspected.methods for d in m.delegates]
    shared = [s for s in inspected.segments if any("delegate" in u for u in s.used_by)]
    assert len(payload_uses) == 3 and len(shared) == 1 and len(shared[0].used_by) == 3
    split = pte_split(path)
    assert sum(n for _, n in split.pte_parts()) == path.stat().st_size
    code, text, _ = run("inspect", path)
    [line] = [line for line in text.splitlines() if line.startswith("size: ")]
    assert code == 0 and line == f"size: {format_size(split.pte)}: " + ", ".join(
        f"{label} {format_size(n)}" for label, n in split.pte_parts())
    assert split.delegate_bytes == payload_uses[0]  # once, not four times
