"""Every path a manifest names is checked before the operating system refuses it: one located
line and exit 2 for a name too long, a folder, a dangling link, a pipe, a file in the way."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.cli import main

LONG = "n" * 300


def weights(folder: Path, name: str) -> Path:
    manifest = folder / "tiny.toml"
    manifest.write_text(manifest.read_text().replace("seed = 1", f'seed = 1\nweights = "{name}"'))
    return manifest


def shim_source(folder: Path, name: str) -> Path:
    manifest = folder / "shims.toml"
    manifest.write_text(f'[shims.aoti_cuda_shims]\nsource = "{name}"\n')
    return manifest


def out_folder(folder: Path, name: str) -> Path:
    manifest = folder / "tiny.toml"
    manifest.write_text(manifest.read_text().replace('out = "out"', f'out = "{name}"'))
    return manifest


CASES = [
    ("weights-too-long", weights, f"{LONG}.pt", None,
     "models.tiny.weights: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...nnnnnnnnnnnnnnnnnnnnn.pt': a name in it is longer than a "
     "file name may be (303 bytes, at most 255); give the path of a torch.save state dict"),
    ("weights-folder", weights, "w.pt", lambda f: (f / "w.pt").mkdir(),
     "models.tiny.weights: 'w.pt': it is a folder, not a file; give the path of a torch.save state dict"),
    ("weights-dangling-link", weights, "w.pt", lambda f: os.symlink(f / "gone.pt", f / "w.pt"),
     "models.tiny.weights: 'w.pt': it is a link to a missing file; give the path of a torch.save state dict"),
    ("weights-pipe", weights, "w.pt", lambda f: os.mkfifo(f / "w.pt"),
     "models.tiny.weights: 'w.pt': it is not a regular file (a device, a pipe or a socket); give the path of a "
     "torch.save state dict"),
    ("weights-missing", weights, "w.pt", None,
     "models.tiny.weights: no such file 'w.pt'; give the path of a torch.save state dict"),
    ("shim-source-too-long", shim_source, f"{LONG}.def", None,
     "shims.aoti_cuda_shims.source: 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...nnnnnnnnnnnnnnnnnnnn.def': a name in it is longer "
     "than a file name may be (304 bytes, at most 255); give a .def or shim-list file"),
    ("shim-source-folder", shim_source, "shims", lambda f: (f / "shims").mkdir(),
     "shims.aoti_cuda_shims.source: 'shims': it is a folder, not a file; give a .def or shim-list file"),
    ("out-too-long", out_folder, f"out/{LONG}", None,
     "defaults.out: 'out/nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...nnnnnnnnnnnnnnnnnnnnnnnn': a name in it is longer than a "
     "file name may be (300 bytes, at most 255); name a folder, relative to the manifest"),
    # TOML's "\u0000": the operating system's calls raise ValueError (embedded null byte) on it.
    ("weights-nul", weights, "w\\u0000.pt", None,
     "models.tiny.weights: 'w\\x00.pt': it holds a NUL character, which no file name may; give the path of a "
     "torch.save state dict"),
    ("shim-source-nul", shim_source, "\\u0000", None,
     "shims.aoti_cuda_shims.source: '\\x00': it holds a NUL character, which no file name may; give a .def or "
     "shim-list file"),
    ("out-nul", out_folder, "out\\u0000", None,
     "defaults.out: 'out\\x00': it holds a NUL character, which no file name may; name a folder, relative to the "
     "manifest"),
    ("out-a-file", out_folder, "tinymodels/tiny.py/out", None,
     "defaults.out: 'tinymodels/tiny.py/out': a folder on its path is a file; name a folder, relative to the manifest"),
]


@pytest.mark.parametrize(("write", "name", "prepare", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_path_is_one_located_line_and_exit_2(tmp_path, capsys, write, name, prepare, message):
    folder = copy_project(tmp_path / "project").parent
    if prepare is not None:
        prepare(folder)
    manifest = write(folder, name)
    assert main(["build", str(manifest), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {manifest}: {message}\n"
    shutil.rmtree(folder)


def test_an_out_folder_that_is_a_file_given_on_the_command_line(tmp_path, capsys):
    manifest = copy_project(tmp_path / "project")
    assert main(["build", str(manifest), "--no-cache", "--out", str(manifest)]) == 2
    # A long path is shown shortened in its middle (path_problems.describe): the temporary folder's name
    # is longer under pytest-xdist.
    from ptebuild.path_problems import describe

    assert capsys.readouterr().err == (f"error: --out: {describe(str(manifest), 'it is a file, not a folder')}; "
                                       "pass a folder to write the outputs into\n")
