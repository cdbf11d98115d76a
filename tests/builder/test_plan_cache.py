"""The plan cache: an unchanged manifest is read back as the plan it resolved to, but only a plan
that this ptebuild's code made (a plan made by other code, such as a checkout before an upgrade,
can miss fields the code now reads, and its defaults would build a program other than the
manifest says)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from ptebuild import own_code
from ptebuild.builder import plan_cache
from ptebuild.store.frontend import Cache


class _Keys:
    """The keys the plan cache stores plans under (the cache itself, spied on)."""

    def __init__(self, cache: Cache) -> None:
        self.keys: list[str] = []
        self._put = cache.memo_put
        cache.memo_put = self.put  # type: ignore[method-assign]

    def put(self, key: str, document: dict) -> None:
        self.keys.append(key)
        self._put(key, document)


def test_a_plan_is_reused_only_by_the_code_that_made_it(tiny_project, tmp_path, monkeypatch):
    cache = Cache.for_folder(tmp_path / "cache")
    spy = _Keys(cache)
    fresh = plan_cache.load_plan(str(tiny_project), cache)
    [key] = spy.keys
    # What other code made of the same bytes: a plan whose programs hold another tolerance.
    other = plan_cache.BuildPlan.from_json(cache.memo_get(key)["plan"], manifest=str(tiny_project),
                                           manifest_dir=str(tiny_project.parent))
    changed = dataclasses.replace(other, programs=tuple(dataclasses.replace(p, rtol=0.25) for p in other.programs))
    cache.memo_put(key, {"plan": changed.to_json()})
    assert {p.rtol for p in plan_cache.load_plan(str(tiny_project), cache).programs} == {0.25}  # the same code: reused

    # Another ptebuild (an edited or upgraded checkout, the same version string): its own plan.
    code = tmp_path / "ptebuild"
    shutil.copytree(own_code.ROOT, code, ignore=shutil.ignore_patterns("__pycache__"))
    (code / "tolerances.py").write_text((code / "tolerances.py").read_text() + "\n# edited\n")
    monkeypatch.setattr(own_code, "ROOT", code)
    again = plan_cache.load_plan(str(tiny_project), cache)
    assert [p.rtol for p in again.programs] == [p.rtol for p in fresh.programs] != [0.25] * len(fresh.programs)


def test_an_unchanged_manifest_is_read_back_without_validating_it(tiny_project, tmp_path, monkeypatch):
    cache = Cache.for_folder(tmp_path / "cache")
    first = plan_cache.load_plan(str(tiny_project), cache)

    def refuse(manifest: str) -> None:
        raise AssertionError("validated again")

    monkeypatch.setattr("ptebuild.manifest.load.load_manifest", refuse)
    assert plan_cache.load_plan(str(tiny_project), cache).to_json() == first.to_json()
    Path(tiny_project).write_text(Path(tiny_project).read_text() + "\n")
    monkeypatch.undo()
    assert plan_cache.load_plan(str(tiny_project), cache).to_json() == first.to_json()
