"""The build loop on real tiny builds: shards, --explain history per manifest, --skip-backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import build_json, ptebuild
from project_copy import copy_project

from ptebuild.builder.build import in_shard


def build_ok(*args: str) -> dict:
    """``ptebuild build ARGS --json`` that must succeed: its report."""
    code, report = build_json(*args)
    assert code == 0, report
    return report


def test_shards_split_by_key_and_a_final_build_restores_everything(tmp_path):
    manifest = copy_project(tmp_path / "project")
    cache = str(tmp_path / "cache")
    built: list[str] = []
    for shard in ("1/2", "2/2"):
        document = build_ok(str(manifest), "--cache", cache, "--shard", shard)
        assert document["shard"] == shard
        built += [p["name"] for p in document["targets"] if p["status"] == "built"]
        assert all(p["status"] == "built" for p in document["targets"])
    assert sorted(built) == ["tiny_portable", "tiny_xnnpack"]  # each program lowered exactly once
    final = build_ok(str(manifest), "--cache", cache)
    assert {p["status"] for p in final["targets"]} == {"cached"}


def test_shard_membership_is_a_function_of_the_key_alone():
    keys = [f"{i:032x}" for i in range(0, 2**20, 997)]
    for count in (1, 2, 3, 7):
        for key in keys:
            assert sum(in_shard(key, (i, count)) for i in range(1, count + 1)) == 1
    assert in_shard(keys[5], None)


def test_bad_shard_is_a_usage_error(tiny_project):
    for bad in ("0/2", "3/2", "1", "a/b", "1/0"):
        result = ptebuild("build", str(tiny_project), "--shard", bad)
        assert result.returncode == 2
        assert "--shard" in result.stderr and "I/N" in result.stderr and "Traceback" not in result.stderr


# Slow: two manifests built in one cache (10 s); tests/test_build.py's explain tests are its fast siblings.
@pytest.mark.slow
def test_two_manifests_in_one_cache_explain_against_their_own_history(tmp_path):
    """Same program names, two manifests, one cache: each --explain compares with its own last build."""
    cache = str(tmp_path / "cache")
    first = copy_project(tmp_path / "a")
    second = copy_project(tmp_path / "b")
    second.write_text(second.read_text().replace("width = 16", "width = 12"))
    build_ok(str(first), "--cache", cache, "--only", "tiny_portable")
    build_ok(str(second), "--cache", cache, "--only", "tiny_portable")
    (first.parent / "tinymodels" / "__init__.py").write_text('"""edited"""\n')
    explained = build_ok(str(first), "--cache", cache, "--only", "tiny_portable", "--explain")["targets"][0]
    # Against the other manifest's build, the width would show as changed too.
    assert explained["explain"] == ["source file tinymodels/__init__.py changed"]


def test_skip_backend_leaves_its_programs_out(tiny_project, tmp_path):
    document = build_ok(str(tiny_project), "--cache", str(tmp_path / "cache"), "--skip-backend", "xnnpack")
    assert [p["name"] for p in document["targets"]] == ["tiny_portable"]
    result = ptebuild("build", str(tiny_project), "--skip-backend", "xnnpak")
    assert result.returncode == 2
    assert "no backend 'xnnpak' (did you mean 'xnnpack'?)" in result.stderr


@pytest.mark.slow
def test_check_passes_on_a_reproducible_program_and_names_the_part_that_differs(tmp_path):
    manifest = copy_project(tmp_path / "project")
    cache = str(tmp_path / "cache")
    same = build_ok(str(manifest), "--cache", cache, "--only", "tiny_portable", "--reproduce")["targets"][0]
    assert same["rebuild"] == "same"

    # Unseeded randomness in the factory: each lowering gets other weights.
    source = manifest.parent / "tinymodels" / "tiny.py"
    source.write_text(
        source.read_text().replace(
            "    return Tiny(**kwargs)",
            "    import random\n    model = Tiny(**kwargs)\n"
            "    torch.nn.init.constant_(model.head.bias, random.random())\n    return model",
        )
    )
    result = ptebuild("build", str(manifest), "--cache", cache, "--only", "tiny_portable", "--reproduce", "--json")
    assert result.returncode == 1
    program = json.loads(result.stdout)["targets"][0]
    assert program["rebuild"] == "differs" and program["status"] == "failed"
    message = program["message"]
    assert message.startswith(f"{manifest}: programs.tiny_portable: --reproduce: lowering again gave other bytes")
    assert "tiny_portable_weights.ptd: key " in message or "data key" in message, message
    # The published files are the first build's, untouched by the check.
    assert (manifest.parent / "out" / "tiny_portable.pte").read_bytes() == bytes(
        Path(next(o["path"] for o in program["outputs"] if o["path"].endswith(".pte"))).read_bytes()
    )


def test_the_longest_lowering_starts_first(tmp_path):
    """Cold (no earlier build): by the backends' weights, int8 XNNPACK, XNNPACK, then portable,
    whatever the manifest's order; once built, by each program's last lowering's seconds."""
    from ptebuild.builder.build import Builder, BuildOptions, longest_first
    from ptebuild.builder.program_target import ProgramTarget
    from ptebuild.hashing import hash_file
    from ptebuild.manifest import load_manifest
    from ptebuild.results import ActionResult, OutputFile
    from ptebuild.store.frontend import Cache

    plan = load_manifest(str(Path(__file__).resolve().parents[2] / "manifests" / "robot.toml"))
    cache = Cache.for_folder(tmp_path / "cache")

    def order() -> list[str]:
        builder = Builder(plan, BuildOptions(out_dir=tmp_path / "out", cache=cache), lambda *_: None)
        targets = []
        for program in plan.programs:
            ProgramTarget.new_result(builder.context, program)
            targets.append(ProgramTarget(builder.context, builder.publisher, program))
        return [job.name for job in longest_first([t.job() for t in targets])]

    assert [p.name for p in plan.programs] == ["policy_portable", "policy_xnnpack", "policy_xnnpack_int8"]
    assert order() == ["policy_xnnpack_int8", "policy_xnnpack", "policy_portable"]

    builder = Builder(plan, BuildOptions(out_dir=tmp_path / "out", cache=cache), lambda *_: None)
    for name, seconds in {"policy_portable": 30.0, "policy_xnnpack": 10.0, "policy_xnnpack_int8": 20.0}.items():
        key = f"{len(name):032x}"  # an earlier build's entry, as the cache's history names it
        pte = tmp_path / f"{name}.pte"
        pte.write_bytes(name.encode())
        output = OutputFile(pte.name, *hash_file(pte))
        cache.save(ActionResult(key=key, target=name, kind="program", outputs=(output,), lower_seconds=seconds), {pte.name: pte})
        builder.context.remember(name, key)
    assert order() == ["policy_portable", "policy_xnnpack_int8", "policy_xnnpack"]
