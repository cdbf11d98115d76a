"""Action keys: everything that changes a program's bytes, and nothing else."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ptebuild import own_code
from ptebuild.builder import keys
from ptebuild.errors import ManifestError
from ptebuild.hashing import hash_file
from ptebuild.manifest import load_manifest


def program_keys(manifest: Path) -> dict[str, str]:
    plan = load_manifest(manifest)
    return {p.name: keys.action_key(keys.program_inputs(p, plan, hash_file)) for p in plan.programs}


def breakdown(manifest: Path, program: str) -> dict[str, str]:
    plan = load_manifest(manifest)
    return keys.program_inputs(next(p for p in plan.programs if p.name == program), plan, hash_file)


def test_keys_differ_between_programs(tiny_project):
    found = program_keys(tiny_project)
    assert len(set(found.values())) == 2


def test_reformatted_manifest_keeps_keys(tiny_project):
    before = program_keys(tiny_project)
    text = tiny_project.read_text()
    # Comments, blank lines, key order inside a table, inline table -> dotted keys.
    text = "# a comment\n\n" + text.replace("kwargs = { width = 16 }\nseed = 1", "seed = 1\nkwargs.width = 16")
    text = text.replace('model = "tiny"\nbackend = "portable"', 'backend = "portable"   # moved\nmodel = "tiny"')
    tiny_project.write_text(text)
    assert program_keys(tiny_project) == before


def test_moved_checkout_keeps_keys(tiny_project, tmp_path):
    before = program_keys(tiny_project)
    moved = tmp_path / "elsewhere" / "deeper"
    shutil.copytree(tiny_project.parent, moved)
    assert program_keys(moved / "tiny.toml") == before


def test_unrelated_environment_keeps_keys(tiny_project, monkeypatch):
    before = program_keys(tiny_project)
    monkeypatch.setenv("USER", "someone-else")
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")
    assert program_keys(tiny_project) == before


def test_no_absolute_path_in_the_breakdown(tiny_project):
    inputs = breakdown(tiny_project, "tiny_portable")
    text = repr(inputs)
    assert str(tiny_project.parent) not in text
    assert "source:tinymodels/tiny.py" in inputs and "source:tinymodels/__init__.py" in inputs


def test_one_weight_byte_changes_the_key(tiny_project):
    weights = tiny_project.parent / "weights.bin"
    weights.write_bytes(bytes(1000))
    tiny_project.write_text(tiny_project.read_text().replace("seed = 1", 'seed = 1\nweights = "weights.bin"'))
    before = program_keys(tiny_project)
    data = bytearray(weights.read_bytes())
    data[500] ^= 1
    weights.write_bytes(bytes(data))
    after = program_keys(tiny_project)
    assert all(before[name] != after[name] for name in before)
    assert "weights:weights.bin" in breakdown(tiny_project, "tiny_portable")


def test_source_change_changes_the_key_and_is_explained(tiny_project):
    old = breakdown(tiny_project, "tiny_portable")
    source = tiny_project.parent / "tinymodels" / "tiny.py"
    source.write_text(source.read_text() + "\n# changed\n")
    new = breakdown(tiny_project, "tiny_portable")
    assert keys.action_key(old) != keys.action_key(new)
    assert keys.explain_changes(old, new, model="tiny", program="tiny_portable") == [
        "source file tinymodels/tiny.py changed"
    ]


def test_new_source_file_in_the_package_is_noticed(tiny_project):
    old = breakdown(tiny_project, "tiny_portable")
    (tiny_project.parent / "tinymodels" / "helpers.py").write_text("X = 1\n")
    new = breakdown(tiny_project, "tiny_portable")
    assert keys.explain_changes(old, new, model="tiny", program="tiny_portable") == [
        "source file tinymodels/helpers.py added"
    ]


def test_manifest_field_change_is_explained(tiny_project):
    old = breakdown(tiny_project, "tiny_xnnpack")
    tiny_project.write_text(tiny_project.read_text().replace("width = 16", "width = 32"))
    new = breakdown(tiny_project, "tiny_xnnpack")
    assert keys.explain_changes(old, new, model="tiny", program="tiny_xnnpack") == [
        "manifest field models.tiny.kwargs.width changed (16 -> 32)"
    ]


def test_other_programs_change_does_not_touch_this_key(tiny_project):
    before = program_keys(tiny_project)
    tiny_project.write_text(tiny_project.read_text().replace('"tiny_xnnpack_weights"', '"other_weights"'))
    after = program_keys(tiny_project)
    assert after["tiny_portable"] == before["tiny_portable"]
    assert after["tiny_xnnpack"] != before["tiny_xnnpack"]


def test_toolchain_version_is_in_the_key(tiny_project, monkeypatch):
    old = breakdown(tiny_project, "tiny_portable")
    facts = dict(keys.toolchain_facts(hash_file))
    monkeypatch.setattr(keys, "_toolchain_cache", {**facts, "toolchain.executorch": "1.6.0"})
    new = breakdown(tiny_project, "tiny_portable")
    assert keys.explain_changes(old, new, model="tiny", program="tiny_portable") == [
        f"executorch version changed ({facts['toolchain.executorch']} -> 1.6.0)"
    ]


def test_extra_sources_glob(tiny_project):
    (tiny_project.parent / "data").mkdir()
    (tiny_project.parent / "data" / "vocab.txt").write_text("a b c")
    tiny_project.write_text(tiny_project.read_text().replace("seed = 1", 'seed = 1\nsources = ["data/*.txt"]'))
    assert "source:data/vocab.txt" in breakdown(tiny_project, "tiny_portable")


def test_source_folders_are_every_folder_where_a_new_file_would_change_the_key(tiny_project):
    # What the no-op stamp lists: a file added in any of them may be a new source.
    project = tiny_project.parent
    for folder in ("tinymodels/assets/deeper", "tinymodels/__pycache__", "data/a", "data/b", "elsewhere"):
        (project / folder).mkdir(parents=True)
    (project / "data" / "a" / "vocab.txt").write_text("a b c")
    tiny_project.write_text(tiny_project.read_text().replace("seed = 1", 'seed = 1\nsources = ["data/**/*.txt"]'))
    plan = load_manifest(tiny_project)
    program = next(p for p in plan.programs if p.name == "tiny_portable")
    folders = {Path(f).resolve() for f in keys.source_folders(program, Path(plan.manifest_dir))}
    expected = {"tinymodels", "tinymodels/assets", "tinymodels/assets/deeper", "data", "data/a", "data/b"}
    assert folders == {(project / f).resolve() for f in expected}
    # Each one would have changed the key: a module in the package's folders, a match of the glob.
    before = breakdown(tiny_project, "tiny_portable")
    (project / "tinymodels" / "assets" / "deeper" / "layer.py").write_text("")
    (project / "data" / "b" / "more.txt").write_text("d")
    added = set(breakdown(tiny_project, "tiny_portable")) - set(before)
    assert added == {"source:tinymodels/assets/deeper/layer.py", "source:data/b/more.txt"}


def test_a_glob_matching_nothing_is_an_error(tiny_project):
    from ptebuild.errors import ManifestError

    tiny_project.write_text(tiny_project.read_text().replace("seed = 1", 'seed = 1\nsources = ["nothing/*.txt"]'))
    with pytest.raises(ManifestError, match=r"models\.tiny\.sources\[0\]: 'nothing/\*\.txt' matches no file"):
        breakdown(tiny_project, "tiny_portable")


@pytest.mark.parametrize("pattern", ["", " ", "/etc/passwd", "../x/*.py", "data/../../x", "a\x00b", ".", "./", "a" * 300 + "/*.py"])
def test_a_glob_that_is_not_a_glob_of_files_beside_the_manifest_is_one_located_line(tiny_project, pattern):
    """Empty, absolute, leaving the folder, a NUL byte, the folder itself: found by the manifest
    fuzzer as ``ValueError: Unacceptable pattern: ''`` (the CLI's internal error, exit 1)."""
    tiny_project.write_text(tiny_project.read_text().replace("seed = 1", f"seed = 1\nsources = [{json.dumps(pattern)}]"))
    with pytest.raises(ManifestError, match=r"models\.tiny\.sources\[0\]: .*; give globs of files relative to the manifest"):
        breakdown(tiny_project, "tiny_portable")


def test_a_budget_is_not_keyed_and_an_etrecord_is(tiny_project):
    from ptebuild.plan import BuildPlan

    before = program_keys(tiny_project)
    text = tiny_project.read_text()
    tiny_project.write_text(text.replace('[defaults]', '[defaults]\nbudget = { max_pte = "1 MiB", min_delegated = 0.5 }', 1)
                            .replace('backend = "portable"', 'backend = "portable"\nbudget = { max_pte = 10 }', 1))
    plan = load_manifest(tiny_project)
    assert program_keys(tiny_project) == before  # a new budget judges the cached program again, it does not lower it
    portable = next(p for p in plan.programs if p.backend == "portable")
    assert [(limit.location, limit.value) for limit in portable.budget.limits] == [
        ("programs.tiny_portable.budget.max_pte", 10), ("defaults.budget.min_delegated", 0.5)]
    again = BuildPlan.from_json(plan.to_json(), manifest=plan.manifest, manifest_dir=plan.manifest_dir)
    assert again == plan
    tiny_project.write_text(tiny_project.read_text().replace('backend = "portable"', 'backend = "portable"\netrecord = true', 1))
    changed = program_keys(tiny_project)
    assert changed["tiny_portable"] != before["tiny_portable"] and changed["tiny_xnnpack"] == before["tiny_xnnpack"]
    assert next(p for p in load_manifest(tiny_project).programs if p.backend == "portable").output_names[-1] == "tiny_portable.etrecord"


def test_samples_files_are_inputs_of_the_key(tiny_project):
    import torch

    data = tiny_project.parent / "data"
    data.mkdir()
    torch.save([(torch.randn(2, 6),)], data / "real.pt")
    text = tiny_project.read_text().replace(
        '[models.tiny.methods.forward]\ninputs = [{ name = "x", shape = ["batch", 6] }]',
        '[models.tiny.methods.forward]\ninputs = [{ name = "x", shape = ["batch", 6] }]\nsamples = "data"',
    )
    tiny_project.write_text(text)
    before = breakdown(tiny_project, "tiny_portable")
    assert before["samples:data/real.pt"] == hash_file(data / "real.pt")[0]
    torch.save([(torch.randn(3, 6),)], data / "real.pt")
    after = breakdown(tiny_project, "tiny_portable")
    assert keys.action_key(after) != keys.action_key(before)
    assert keys.explain_changes(before, after) == ["samples file data/real.pt changed"]
    torch.save([(torch.randn(1, 6),)], data / "more.pt")  # a new file in the folder: a new input
    assert "samples:data/more.pt" in breakdown(tiny_project, "tiny_portable")


def test_a_samples_factory_is_keyed_by_its_code_and_a_missing_file_is_located(tiny_project):
    text = tiny_project.read_text()
    factory = text.replace('inputs = [{ name = "x", shape = ["batch", 6] }]',
                           'inputs = [{ name = "x", shape = ["batch", 6] }]\nsamples = "realdata:load"', 1)
    (tiny_project.parent / "realdata.py").write_text("def load():\n    return []\n")
    tiny_project.write_text(factory)
    assert "source:realdata.py" in breakdown(tiny_project, "tiny_portable")
    tiny_project.write_text(factory.replace('"realdata:load"', '"missing/real.pt"'))
    with pytest.raises(ManifestError, match=r"tiny.toml: models.tiny.methods.forward.samples: no such file or folder 'missing/real.pt'"):
        breakdown(tiny_project, "tiny_portable")


# -- keys that cannot go stale: ptebuild's own code by its import closure, and pinned keys -------------

PINNED = {
    ("robot.toml", "policy_portable"): "dea9dc3693d8a56d6f0d389cc8641b7a",
    ("robot.toml", "policy_xnnpack"): "e8f108b1f1d1ce3dd9a41800e8a86b32",
    ("robot.toml", "policy_xnnpack_int8"): "ac41c6dbb9d9ca2bb113be634571ac5e",
    ("chat.toml", "chat_xnnpack"): "2c81bbf81b6b1a5a77d1e7d27e94810d",
    ("chat.toml", "chat_xnnpack_8da4w"): "075890138917c9d054353b2db36168f8",
    ("chat.toml", "chat_lora_story"): "70ac3fd5e4a5b64612a72d497a5a88c8",
    ("chat.toml", "chat_lora_poem"): "4671d923823f581bae12dd3b4112e011",
}
"""The keys of the sample manifests' programs, less their toolchain facts (versions, ptebuild's code):
what the manifest, its schema's defaults and its files give. A change here moves every user's keys
(every program of theirs rebuilds): make it on purpose, then update these."""


def test_the_sample_manifests_keys_are_pinned():
    from ptebuild import keyinputs

    manifests = Path(__file__).resolve().parents[2] / "manifests"
    moved = []
    for (manifest, name), pinned in PINNED.items():
        plan = load_manifest(manifests / manifest)
        program = next(p for p in plan.programs if p.name == name)
        inputs = keyinputs.without(keys.program_inputs(program, plan, hash_file), [keyinputs.InputKind.TOOLCHAIN])
        if keys.action_key(inputs) != pinned:
            moved.append(f"{manifest} {name}: {json.dumps(inputs, indent=1, sort_keys=True)}")
    assert not moved, "keys moved (a schema default, a new input?); if on purpose, update PINNED:\n" + "\n".join(moved)


def test_every_program_key_covers_the_worker_its_kind_and_its_backend(tiny_project):
    plan = load_manifest(tiny_project)
    for program in plan.programs:
        entries = keys.code_entries(program)
        assert entries[0] == keys.WORKER_ENTRY and f"ptebuild.backends.{program.backend}" in entries
        assert keys.program_inputs(program, plan, hash_file)["toolchain.ptebuild-code"] == own_code.closure_digest(entries)


def _editable_copy(tmp_path: Path) -> tuple[Path, dict]:
    """ptebuild's package copied to a source folder first on PYTHONPATH (an editable install's case)."""
    import os

    source = tmp_path / "src"
    shutil.copytree(own_code.ROOT, source / "ptebuild", ignore=shutil.ignore_patterns("__pycache__"))
    return source / "ptebuild", {"PYTHONPATH": os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_an_edit_deep_in_the_lowering_code_of_an_editable_install_rebuilds(tiny_project, tmp_path):
    """Seen here: an edit of runtime/keys.py (the weight-key format of every .pte) left programs
    'up to date' by a key over a hand-kept list of modules; worker/checkpoints.py (now models/factory/), in no list, would
    have handed back the old program. Now each is in the key by the import closure."""
    from helpers import ptebuild

    package, env = _editable_copy(tmp_path)
    cache = ["--cache", str(tmp_path / "cache"), "--executor", "local", "-j1"]
    first = ptebuild("build", tiny_project, "--only", "tiny_portable", *cache, env=env, cwd=tmp_path)  # not the checkout's
    assert first.returncode == 0, first.stderr
    for deep in ("runtime/keys.py", "models/factory/checkpoints.py"):
        path = package / deep
        path.write_text(path.read_text() + "\n# an edit that changes no behaviour, but could have\n")
        again = ptebuild("build", tiny_project, "--only", "tiny_portable", "--explain", *cache, env=env, cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert f"ptebuild's lowering code changed: ptebuild/{deep}" in again.stdout, again.stdout
        assert "built" in again.stdout and "up to date" not in again.stdout, again.stdout


def test_an_edit_deep_in_the_lowering_code_changes_the_key(tiny_project, tmp_path, monkeypatch):
    """The fast sibling of the test above: the key itself, computed as a build of that copy would."""
    package, _ = _editable_copy(tmp_path)
    plan = load_manifest(tiny_project)
    program = plan.programs[0]
    entries = keys.code_entries(program)
    before = own_code.closure_digest(entries, root=package)
    path = package / "models" / "factory" / "checkpoints.py"
    path.write_text(path.read_text() + "\n# an edit\n")
    assert own_code.closure_digest(entries, root=package) != before


@pytest.mark.slow
def test_every_ptebuild_module_a_real_task_runs_is_in_its_key(tiny_project, tmp_path):
    """What a worker really imports while it lowers and checks each program (its ``sys.modules``)
    is inside the import closure its key digests."""
    import subprocess
    import sys

    from tasks_for_tests import make_tasks

    tasks = make_tasks(tiny_project, tmp_path / "store")
    script = (
        "import json, sys\n"
        "from ptebuild.worker.execute import execute, prepare_worker\n"
        "from ptebuild.worker.tasks import Task, TaskFailure\n"
        "prepare_worker()\n"
        "for text in sys.argv[1:]:\n"
        "    result = execute(Task.from_json(json.loads(text)), lambda line: None)\n"
        "    assert not isinstance(result, TaskFailure), result\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ptebuild')))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, *(json.dumps(t.to_json()) for t in tasks.values())],
                          capture_output=True, text=True, timeout=600, cwd=tiny_project.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    ran = set(json.loads(done.stdout.splitlines()[-1]))
    plan = load_manifest(tiny_project)
    keyed = set()
    for program in plan.programs:
        keyed |= {".".join(p.relative_to(own_code.ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for p in own_code.closure_files(keys.code_entries(program))}
    keyed = {f"ptebuild.{m}" if m != "__init__" else "ptebuild" for m in keyed}
    assert ran - keyed == set()
