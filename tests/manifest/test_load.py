"""Reading and validating manifests: every bad manifest gets its exact one-line message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ptebuild.errors import DataNameError, ManifestError
from ptebuild.manifest import load_manifest
from ptebuild.plan import BuildPlan

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
BAD = sorted(MANIFESTS.glob("bad-*.toml"))


def expected_message(path: Path, display: str) -> str:
    """The manifest's ``# expect:`` line: ``{file}``, ``{dir}`` and ``{backends}`` (the registry's
    backend names, quoted: installed plug-ins are among them) filled in."""
    from ptebuild.backends import backend_names

    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    backends = ", ".join(map(repr, backend_names()))
    return first.removeprefix("# expect: ").format(file=display, dir=str(path.parent), backends=backends)


def test_there_are_bad_manifests():
    assert len(BAD) >= 25


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_manifest_message(path: Path, monkeypatch):
    monkeypatch.chdir(path.parent)
    with pytest.raises(ManifestError) as info:
        load_manifest(path.name)
    assert str(info.value) == expected_message(path, path.name)
    assert "\n" not in str(info.value)


def test_name_errors_are_data_name_errors(monkeypatch):
    monkeypatch.chdir(MANIFESTS)
    for name in ("bad-data-name-device.toml", "bad-data-name-case-collision.toml", "bad-data-name-extension.toml"):
        with pytest.raises(DataNameError):
            load_manifest(name)


def test_missing_file():
    with pytest.raises(ManifestError, match=r"^nope\.toml: no such file; give the path of a \.toml manifest$"):
        load_manifest("nope.toml")


def test_good_manifest_resolves(tiny_project: Path):
    plan = load_manifest(tiny_project)
    assert [p.name for p in plan.programs] == ["tiny_portable", "tiny_xnnpack"]
    portable = plan.programs[0]
    assert portable.backend == "portable"
    assert portable.data_name == "tiny_portable_weights"
    assert portable.output_names == ("tiny_portable.pte", "tiny_portable_weights.ptd")
    assert [m.name for m in portable.methods] == ["forward", "score"]
    score = portable.methods[1]
    assert [i.dtype for i in score.inputs] == ["float32", "int64", "bool"]
    assert [(d.name, d.min, d.max, d.example) for d in score.dims] == [("batch", 1, 4, 2)]
    assert plan.out_dir() == tiny_project.parent / "out"


def test_plan_json_round_trip(tiny_project: Path):
    plan = load_manifest(tiny_project)
    again = BuildPlan.from_json(plan.to_json(), manifest=plan.manifest, manifest_dir=plan.manifest_dir)
    assert again == plan


def test_reformatted_manifest_gives_the_same_plan(tiny_project: Path):
    """Reordering tables and keys, inline tables and comments change nothing."""
    plan = load_manifest(tiny_project)
    reformatted = tiny_project.with_name("reformatted.toml")
    reformatted.write_text(
        """
# programs first, keys shuffled
[programs.tiny_xnnpack]
data_name = "tiny_xnnpack_weights"
backend   = "xnnpack"
model     = "tiny"

[programs.tiny_portable]
data_name = "tiny_portable_weights"
model = "tiny"
backend = "portable"

[models.tiny]
seed = 1
factory = "tinymodels.tiny:make_tiny"
[models.tiny.kwargs]
width = 16
[models.tiny.dims.batch]
max = 4
min = 1

[models.tiny.methods.score]
inputs = [
  { dtype = "float32", shape = ["batch", 6], name = "x" },
  { name = "tokens", shape = ["batch"], dtype = "int64", high = 10, low = 0 },
  { shape = ["batch"], name = "mask", dtype = "bool" },
]
[models.tiny.methods.forward]
inputs = [{ shape = ["batch", 6], name = "x" }]

[defaults]
out = "out"
"""
    )
    again = load_manifest(reformatted)
    by_name = {p.name: p for p in again.programs}
    for program in plan.programs:
        other = by_name[program.name]
        assert other.model_entry == program.model_entry or json.dumps(
            other.model_entry, sort_keys=True
        ) == json.dumps(program.model_entry, sort_keys=True)
        assert other.program_entry == program.program_entry


def test_defaults_apply(tiny_project: Path):
    text = tiny_project.read_text().replace('backend = "portable"\n', "")
    text = text.replace('[defaults]\nout = "out"', '[defaults]\nout = "out"\nbackend = "portable"\ncheck = { atol = 0.5 }')
    tiny_project.write_text(text)
    plan = load_manifest(tiny_project)
    assert plan.programs[0].backend == "portable"
    assert plan.programs[0].atol == 0.5
    assert plan.programs[1].backend == "xnnpack"


def test_manifest_check_does_not_import_torch(tiny_project: Path):
    code = (
        "import sys\n"
        "from ptebuild.cli import main\n"
        f"rc = main(['build', {str(MANIFESTS / 'bad-data-name-device.toml')!r}, '--no-cache'])\n"
        "assert rc == 2, rc\n"
        "heavy = [m for m in ('torch', 'executorch') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("\n") == 1 and "Windows device name" in result.stderr


def test_backend_keeping_data_in_the_pte_refuses_a_data_name(tiny_project, monkeypatch):
    """Such a backend (Metal, upstream) cannot write a .ptd: a data_name is an error, not ignored."""
    import dataclasses

    from ptebuild.backends import get_backend
    from ptebuild.manifest import resolve

    inline_only = dataclasses.replace(get_backend("portable"), keeps_data_in_pte=True)
    monkeypatch.setattr(resolve, "get_backend", lambda name: inline_only if name == "portable" else get_backend(name))
    with pytest.raises(DataNameError) as info:
        load_manifest(tiny_project)
    assert str(info.value) == (
        f"{tiny_project}: programs.tiny_portable.data_name: backend 'portable' keeps its data inside "
        "the .pte and cannot write a .ptd; remove data_name"
    )


def test_bundles_resolve_into_the_plan(tmp_path: Path, tiny_project: Path):
    """Globs resolve sorted, ``bundle_io`` of a bundle reaches its programs, outputs gain the .bpte;
    a program without it keeps its manifest entry (and so its key)."""
    from release_build import bundle_project

    plan = load_manifest(bundle_project(tmp_path / "bundles"))
    assert [(b.name, b.programs, b.archive, b.include) for b in plan.bundles] == [
        ("edge", ("tiny_inside", "tiny_portable", "tiny_xnnpack"), "edge.tar.gz", ("NOTICE",)),
        ("mobile", ("tiny_xnnpack",), "tiny-mobile.zip", ()),
    ]
    programs = {p.name: p for p in plan.programs}
    assert {name: p.bundle_io for name, p in programs.items()} == {"tiny_portable": False, "tiny_xnnpack": True, "tiny_inside": True}
    assert programs["tiny_xnnpack"].output_names == ("tiny_xnnpack.pte", "tiny_xnnpack_weights.ptd", "tiny_xnnpack.bpte")
    assert programs["tiny_inside"].output_names == ("tiny_inside.pte", "tiny_inside.bpte")
    assert programs["tiny_xnnpack"].program_entry["bundle_io"] is True
    plain = {p.name: p for p in load_manifest(tiny_project).programs}
    assert programs["tiny_portable"].program_entry == plain["tiny_portable"].program_entry
    assert plan.dist_dir() == tmp_path / "bundles" / "dist"
    assert BuildPlan.from_json(plan.to_json(), manifest=plan.manifest, manifest_dir=plan.manifest_dir) == plan


@pytest.mark.parametrize("name,key", [("\n", '"\\n"'), ("a b", '"a b"'), ('q"t', '"q\\"t"'), ("tab\there", '"tab\\there"')])
def test_a_name_no_bare_key_can_spell_is_quoted_as_toml_does_on_one_line(tmp_path: Path, name: str, key: str):
    """Found by the fuzz test's random draws: a program's model named "\\n" gave a message whose
    fix clause, [models.<name>], broke the line."""
    import tomli_w

    manifest = tmp_path / "m.toml"
    manifest.write_text(tomli_w.dumps({"programs": {"p": {"model": name, "backend": "portable"}}}))
    with pytest.raises(ManifestError) as caught:
        load_manifest(manifest)
    line = str(caught.value)
    assert "\n" not in line and line.endswith(f"; declare it as [models.{key}]"), line
