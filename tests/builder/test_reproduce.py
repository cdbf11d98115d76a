"""``build --reproduce`` varies what it says it varies: one factory per varied thing, each depending on
exactly that (the hash seed, the working folder, the temporary folder, the thread count), and a
control that depends on none. Each of the four is named as differing; the control is not."""

from __future__ import annotations

import json

import pytest
from helpers import ptebuild
from project_copy import copy_project

VARIED = '''
import os, tempfile, zlib

import torch

from tinymodels.tiny import Tiny


def _value(thing: str) -> float:
    if thing == "hash_seed":
        return hash("ptebuild") % 1000 / 1000
    if thing == "working_folder":
        return zlib.crc32(os.getcwd().encode()) % 1000 / 1000
    if thing == "temporary_folder":
        return zlib.crc32(tempfile.gettempdir().encode()) % 1000 / 1000
    if thing == "threads":
        return float(torch.get_num_threads())
    return 0.5


def make(thing: str) -> Tiny:
    model = Tiny(width=8)
    with torch.no_grad():
        model.head.bias.fill_(_value(thing))
    return model
'''

THINGS = ("hash_seed", "working_folder", "temporary_folder", "threads", "nothing")


# Every varied thing is slow (ten programs lowered, 24 s); one of them and the control is its fast sibling.
@pytest.mark.parametrize("things", [pytest.param(THINGS, marks=pytest.mark.slow, id="all"), pytest.param(("hash_seed", "nothing"), id="one")])
def test_check_names_each_thing_it_varies_as_differing(tmp_path, things):
    manifest = copy_project(tmp_path / "project")
    (manifest.parent / "tinymodels" / "varied.py").write_text(VARIED)
    tables = ['[defaults]\nout = "out"\n']
    for thing in things:
        tables.append(
            f'[models.{thing}]\nfactory = "tinymodels.varied:make"\nkwargs = {{ thing = "{thing}" }}\n'
            f'[models.{thing}.methods.forward]\ninputs = [{{ name = "x", shape = [2, 6] }}]\n'
            f'[programs.{thing}]\nmodel = "{thing}"\nbackend = "portable"\n'
        )
    manifest.write_text("".join(tables))
    cache = tmp_path / "cache"
    first = ptebuild("build", manifest, "--cache", cache, "--json")
    assert first.returncode == 0, first.stderr[-2000:]
    again = ptebuild("build", manifest, "--cache", cache, "--reproduce", "--keep-going", "--json")
    assert again.returncode == 1, again.stderr[-2000:]
    programs = {p["name"]: p for p in json.loads(again.stdout)["targets"]}
    verdicts = {name: p.get("rebuild") for name, p in programs.items()}
    assert verdicts == {thing: "same" if thing == "nothing" else "differs" for thing in things}
    for thing in things[:-1]:
        assert programs[thing]["message"].startswith(
            f"{manifest}: programs.{thing}: --reproduce: lowering again gave other bytes (not reproducible with another "
            "PYTHONHASHSEED, working folder, temporary folder and thread count)"), programs[thing]
    # The verdict is where people look: a `reproducible` column in the table, not only a progress line.
    from ptebuild.cli.build import summary

    table = summary(json.loads(again.stdout)).splitlines()
    assert table[0].split() == ["target", "backend", "status", "seconds", "check", "delegated", "planned", "reproducible", "outputs"]
    column = table[0].index("reproducible")
    rows = {line.split()[0]: line[column:].split()[0] for line in table[1:1 + len(things)]}
    assert rows == {thing: "yes" if thing == "nothing" else "NO" for thing in things}
    assert table[-1].startswith(f"{len(things) - 1} failed, 1 cached; 1 of {len(things)} reproducible in ")
