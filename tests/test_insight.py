"""What is inside each program, end to end (issue 29): a real build of tests/manifests/insight.toml
(a CNN on XNNPACK in float and static int8, a model with operators XNNPACK does not take, a
portable program) gives, per program, in the report, the build record and ``inspect``: its
delegation, counted as ExecuTorch's own ``get_delegation_info`` counts it on the same program;
its size split; each method's planned memory. Budgets fail a cached program without lowering it,
and ``pack`` refuses a bundle over one; ``--timings`` writes a page a browser renders; ETRecords
are written, cached and carried by the bundles that ask; ``diff`` of two output folders shows a
release that falls back to kernels."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from delegation_check import compare, lowered_again
from helpers import build_json, ptebuild

from ptebuild.insight.delegation import Delegation
from ptebuild.insight.program import ProgramInsight

MANIFESTS = Path(__file__).resolve().parent / "manifests"
PROGRAMS = ("cnn_xnnpack", "cnn_portable", "cnn_int8", "mixed_xnnpack")


def _project(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(MANIFESTS / "insight.toml", dest / "insight.toml")
    shutil.copytree(MANIFESTS / "insightmodels", dest / "insightmodels", ignore=shutil.ignore_patterns("__pycache__"))
    return dest / "insight.toml"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The project built once (its own cache): ``(manifest, cache, report)``."""
    root = tmp_path_factory.mktemp("insight")
    manifest = _project(root / "project")
    code, report = build_json(manifest, "--cache", root / "cache", "--timings")
    assert code == 0, report
    return manifest, root / "cache", report


def _record(manifest: Path) -> dict:
    return json.loads((manifest.parent / "out" / "ptebuild.json").read_text())["targets"]


@pytest.mark.parametrize("name", [pytest.param(p, marks=pytest.mark.slow) if p in ("cnn_portable", "cnn_xnnpack", "cnn_int8") else p for p in PROGRAMS])
def test_the_recorded_delegation_is_get_delegation_infos(built, name, monkeypatch, tmp_path):
    manifest, _, report = built
    recorded = Delegation.from_json(_record(manifest)[name]["insight"]["delegation"])
    infos, lowered = lowered_again(manifest, name, monkeypatch, tmp_path)
    assert lowered.insight.delegation == recorded  # the same program, counted the same way
    for method, ours, theirs in compare(recorded, infos):
        print(f"{name} {method}: (delegated, non-delegated, subgraphs) ours {ours}, get_delegation_info {theirs}")
    program = next(p for p in report["targets"] if p["name"] == name)
    assert program["delegation"] == recorded.to_json()


def test_what_each_program_is_made_of(built):
    manifest, _, report = built
    figures = {name: ProgramInsight.from_json(entry["insight"]) for name, entry in _record(manifest).items()}
    assert figures["cnn_portable"].delegation.fraction == 0.0
    assert figures["cnn_xnnpack"].delegation.fraction > 0.7
    assert dict(figures["cnn_xnnpack"].delegation.non_delegated()) == {"aten_mean_dim": 1}
    assert {"aten_cumsum_default", "aten_argmax_default"} <= set(dict(figures["mixed_xnnpack"].delegation.non_delegated()))
    int8 = figures["cnn_int8"]
    assert any(op.startswith("quantized_decomposed_") for m in int8.delegation.methods for s in m.delegates for op, _ in s.operators)
    for name, f in figures.items():
        pte = manifest.parent / "out" / f"{name}.pte"
        assert f.size.pte == pte.stat().st_size == sum(n for _, n in f.size.pte_parts())
        assert f.planned_bytes > 0
    assert [w.name for w in figures["cnn_xnnpack"].size.ptd] == ["cnn_weights.ptd"]
    assert figures["cnn_xnnpack"].size.ptd[0].shared_with == ("cnn_portable",)
    assert figures["cnn_int8"].size.ptd == () and figures["cnn_int8"].size.named_data > 0  # its weights are inside
    (example, at_max) = figures["cnn_xnnpack"].memory[0].io
    assert (example.sizes, at_max.sizes) == ((("batch", 2),), (("batch", 4),))
    assert (example.inputs, example.outputs, at_max.inputs, at_max.outputs) == (2 * 3 * 16 * 16 * 4, 2 * 4 * 4, 4 * 3 * 16 * 16 * 4, 4 * 4 * 4)
    rows = {p["name"]: p for p in report["targets"]}
    assert rows["cnn_int8"]["size"] == figures["cnn_int8"].size.to_json()
    assert rows["mixed_xnnpack"]["memory"]["forward"]["planned_bytes"] == figures["mixed_xnnpack"].planned_bytes


def test_inspect_shows_the_files_figures_and_the_records(built):
    manifest, _, _ = built
    pte = manifest.parent / "out" / "mixed_xnnpack.pte"
    done = ptebuild("inspect", pte, "--full")  # every part (the default is a summary: issue 30)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("calls forward: 1 delegate calls (XnnpackBackend ×1), 2 operator calls") for line in lines)
    assert "program mixed_xnnpack (recorded by its build, ptebuild.json)" in lines
    assert any(line.startswith("delegation: ") and "aten_argmax_default ×1" in line for line in lines)
    document = json.loads(ptebuild("inspect", pte, "--json").stdout)
    assert document["insight"]["recorded"] and document["insight"]["delegation"] == _record(manifest)["mixed_xnnpack"]["insight"]["delegation"]
    assert document["insight"]["size"]["pte"] == pte.stat().st_size


def test_inspects_summary_names_the_operators_left_to_kernels_and_the_planned_memory(built):
    """The default summary (issue 30) keeps what issue 29 asks to see at a glance: the operators the
    delegates left to kernels, as the build counted them, and each method's planned memory."""
    manifest, _, _ = built
    lines = ptebuild("inspect", manifest.parent / "out" / "mixed_xnnpack.pte").stdout.splitlines()
    assert "left to kernels in forward: aten_argmax_default ×1, aten_cumsum_default ×1" in lines
    assert any(line.startswith("planned memory: forward ") for line in lines)


def test_budgets_judge_a_cached_program_again_without_lowering(built, tmp_path):
    _, cache, _ = built
    manifest = _project(tmp_path / "copy")
    text = manifest.read_text()
    over = text.replace('[defaults]\nout = "out"', '[defaults]\nout = "out"\nbudget = { min_delegated = 0.5, max_planned_memory = "1 MiB" }')
    over = over.replace('data_name = "mixed_weights"', 'data_name = "mixed_weights"\nbudget = { min_delegated = 0.9, max_pte = 100 }')
    manifest.write_text(over)
    done = ptebuild("build", manifest, "--cache", cache, "--json")
    assert done.returncode == 1, done.stderr
    report = {p["name"]: p for p in json.loads(done.stdout)["targets"]}
    assert "lowering for" not in done.stderr  # judged after the restore: nothing lowered
    assert [name for name, p in report.items() if p["status"] == "over-budget"] == ["cnn_portable", "mixed_xnnpack"]
    assert [b["limit"] for b in report["mixed_xnnpack"]["budget"]] == [
        "programs.mixed_xnnpack.budget.max_pte", "programs.mixed_xnnpack.budget.min_delegated"]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors[0] == (f"error: {manifest}: defaults.budget.min_delegated: 0.0% of its operator nodes are delegated, under the budget "
                         "of 50% (left to kernels: " + errors[0].split("(left to kernels: ", 1)[1])
    assert errors[1].startswith(f"error: {manifest}: programs.mixed_xnnpack.budget.max_pte: mixed_xnnpack.pte is ")
    assert errors[1].endswith("(and 1 more: min_delegated)")
    within = text.replace('data_name = "mixed_weights"', 'data_name = "mixed_weights"\nbudget = { min_delegated = 0.5, max_pte = "1 MiB" }')
    manifest.write_text(within)
    done = ptebuild("build", manifest, "--cache", cache)
    assert done.returncode == 0, done.stderr
    refused = ptebuild("pack", manifest, "--bundle", "debug")
    assert refused.returncode == 0, refused.stderr
    manifest.write_text(within.replace('budget = { min_delegated = 0.5, max_pte = "1 MiB" }', 'budget = { max_ptd = "1 KiB" }'))
    refused = ptebuild("pack", manifest, "--bundle", "debug", "-o", tmp_path / "debug.tar.gz")
    assert refused.returncode == 1 and not (tmp_path / "debug.tar.gz").exists()
    assert refused.stderr.startswith(f"error: {manifest}: programs.mixed_xnnpack.budget.max_ptd: mixed_weights.ptd is ")
    assert refused.stderr.rstrip().endswith("; nothing packed; bring the program within its budget or raise the budget, then build and pack again")


def test_the_timings_page_opens_in_a_browser(built):
    from browser import dump_dom

    manifest, _, report = built
    page = Path(report["timings"]["html"])
    assert page == manifest.parent / "out" / ".ptebuild" / "timings.html"
    dom = dump_dom(page)
    for name in PROGRAMS:
        assert name in dom
    trace = json.loads(Path(report["timings"]["trace"]).read_text())
    stages = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "stage"}
    assert {"export", "lowering", "emitting", "checking"} <= stages


def test_etrecords_are_written_cached_and_carried_by_the_bundles_that_ask(built, tmp_path):
    from executorch.devtools import parse_etrecord

    manifest, cache, _ = built
    out = manifest.parent / "out"
    record = _record(manifest)
    assert "cnn_xnnpack.etrecord" in record["cnn_xnnpack"]["outputs"]
    assert "cnn_int8.etrecord" in record["cnn_int8"]["outputs"]  # the debug bundle asks for its programs'
    assert not any(f.endswith(".etrecord") for f in record["cnn_portable"]["outputs"])
    etrecord = parse_etrecord(str(out / "cnn_xnnpack.etrecord"))
    assert set(etrecord.edge_dialect_program) == {"forward"} if isinstance(etrecord.edge_dialect_program, dict) else etrecord.edge_dialect_program
    (out / "cnn_xnnpack.etrecord").unlink()
    code, report = build_json(manifest, "--cache", cache)
    assert code == 0 and (out / "cnn_xnnpack.etrecord").is_file()
    assert {p["name"]: p["status"] for p in report["targets"]}["cnn_xnnpack"] == "cached"
    import tarfile

    phone = ptebuild("pack", manifest, "--bundle", "phone", "-o", tmp_path / "phone.tar.gz")
    debug = ptebuild("pack", manifest, "--bundle", "debug", "-o", tmp_path / "debug.tar.gz")
    assert phone.returncode == 0 and debug.returncode == 0, phone.stderr + debug.stderr
    names = {b: {Path(m).name for m in tarfile.open(tmp_path / f"{b}.tar.gz").getnames()} for b in ("phone", "debug")}
    assert "cnn_xnnpack.etrecord" in names["phone"] and "cnn_int8.etrecord" not in names["phone"]
    assert {"cnn_int8.etrecord", "mixed_xnnpack.etrecord"} <= names["debug"]
    for bundle in ("phone", "debug"):
        assert ptebuild("verify", tmp_path / f"{bundle}.tar.gz").returncode == 0


def test_diff_of_two_builds_shows_a_release_that_falls_back_to_kernels(built, tmp_path):
    manifest, cache, _ = built
    newer = _project(tmp_path / "newer")
    newer.write_text(newer.read_text().replace('seed = 3\n', 'seed = 3\nkwargs = { fallback = true }\n'))
    done = ptebuild("build", newer, "--cache", cache, "--only", "cnn_xnnpack")
    assert done.returncode == 0, done.stderr
    diff = ptebuild("diff", manifest.parent / "out", newer.parent / "out")
    assert diff.returncode == 1, diff.stderr
    lines = diff.stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("  cnn_xnnpack: ")]
    assert "delegated " in line and "points)" in line and "fell back to kernels" in line.rsplit("[", 1)[1]
    document = json.loads(ptebuild("diff", manifest.parent / "out", newer.parent / "out", "--json").stdout)
    change = next(p for p in document["programs"] if p["name"] == "cnn_xnnpack")["figures"]
    assert change["delegated"]["after"] < change["delegated"]["before"] and "fell back to kernels" in change["worse"]


def test_a_bundle_from_the_cache_has_the_same_figures_and_bytes(built, tmp_path):
    import hashlib
    import tarfile

    manifest, cache, _ = built
    assert ptebuild("lock", manifest, "--cache", cache).returncode == 0
    try:
        folder = ptebuild("pack", manifest, "--bundle", "phone", "-o", tmp_path / "a" / "phone.tar.gz")
        cached = ptebuild("pack", manifest, "--bundle", "phone", "-o", tmp_path / "b" / "phone.tar.gz", "--from-cache", "--cache", cache)
    finally:
        (manifest.parent / "ptebuild.lock").unlink()
    assert folder.returncode == 0 and cached.returncode == 0, folder.stderr + cached.stderr
    a, b = (tmp_path / side / "phone.tar.gz" for side in ("a", "b"))
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    with tarfile.open(a) as archive:
        record = json.load(archive.extractfile("phone/ptebuild.json"))
    xnnpack = record["targets"]["cnn_xnnpack"]
    assert xnnpack["insight"]["delegation"] == _record(manifest)["cnn_xnnpack"]["insight"]["delegation"]
    assert xnnpack["insight"]["size"]["ptd"] == [{"name": "cnn_weights.ptd", "bytes": xnnpack["outputs"]["cnn_weights.ptd"]["bytes"],
                                                  "shared_with": []}]  # cnn_portable, which shares it, is not in this bundle
    assert xnnpack["checked"] == _record(manifest)["cnn_xnnpack"]["checked"] and xnnpack["checked"]["cosine"] > 0.999
