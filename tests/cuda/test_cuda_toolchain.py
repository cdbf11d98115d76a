"""The CUDA backend's machine facts, read without importing torch: its key facts (torch's CUDA
build from torch's own ``version.py``), and what the Windows cross toolchain lacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ptebuild.backends.cuda import toolchain

DATA = Path(__file__).resolve().parent / "data"

# torch/version.py as torch 2.11.0+cu130 writes it (the H200's torch), behind a line that fails
# if the file is imported rather than read.
GPU_TORCH_VERSION_PY = """raise ImportError("torch/version.py was imported, not read")
from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']
__version__ = '2.11.0+cu130'
debug = False
cuda: Optional[str] = '13.0'
git_version = '0123456789abcdef0123456789abcdef01234567'
hip: Optional[str] = None
rocm: Optional[str] = None
xpu: Optional[str] = None
"""


def _fake_torch(root: Path, version_py: str) -> Path:
    """A folder to search holding a ``torch`` package whose ``version.py`` is ``version_py``."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ImportError("torch was imported")\n')
    (package / "version.py").write_text(version_py)
    return root


@pytest.fixture
def dist_torch(monkeypatch):
    """The torch dist-info's version, as pip wrote it (PyPI's CUDA 13.0 build: no ``+cu130``)."""
    real = toolchain._dist_version
    versions = {"torch": "2.11.0"}
    monkeypatch.setattr(toolchain, "_dist_version", lambda *names: versions.get(names[0]) if names == ("torch",) else real(*names))
    return versions


@pytest.fixture
def cuda_home(monkeypatch, tmp_path):
    """A CUDA toolkit under $CUDA_HOME whose version differs from the one torch was built with."""
    home = tmp_path / "cuda-home"
    home.mkdir()
    (home / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "12.8.93"}}))
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    return home


def test_cuda_build_and_toolkit_are_read_from_torchs_version_file(tmp_path, dist_torch, cuda_home):
    """Issue 19: on the H200 both facts read ``none`` (the dist-info says ``2.11.0``); torch's
    ``version.py`` says ``2.11.0+cu130`` and CUDA 13.0."""
    search = _fake_torch(tmp_path / "site", GPU_TORCH_VERSION_PY)
    assert toolchain.torch_version_file([search]) == search / "torch" / "version.py"
    fields = toolchain.torch_version_fields([search])
    assert fields["__version__"] == "2.11.0+cu130" and fields["cuda"] == "13.0" and fields["hip"] is None
    facts = toolchain.toolchain_facts({}, torch_search_path=[search])
    assert facts["cuda.torch_build"] == "cu130"
    assert facts["cuda.toolkit"] == "13.0"  # what torch was built with, not $CUDA_HOME's 12.8.93


def test_facts_fall_back_where_torchs_version_file_says_nothing(tmp_path, dist_torch, cuda_home):
    dist_torch["torch"] = "2.11.0+cu128"
    cpu = _fake_torch(tmp_path / "cpu", "__version__ = '2.11.0'\ncuda = None\n")
    facts = toolchain.toolchain_facts({}, torch_search_path=[cpu])
    assert (facts["cuda.torch_build"], facts["cuda.toolkit"]) == ("cu128", "12.8.93")
    broken = _fake_torch(tmp_path / "broken", "__version__ = '2.11.0+cu130\n")  # unterminated
    assert toolchain.torch_version_fields([broken]) == {}
    nowhere = tmp_path / "empty"
    nowhere.mkdir()
    assert toolchain.torch_version_file([nowhere]) is None
    assert toolchain.toolchain_facts({}, torch_search_path=[nowhere])["cuda.torch_build"] == "cu128"
    dist_torch["torch"] = None
    facts = toolchain.toolchain_facts({}, torch_search_path=[nowhere])
    assert facts["cuda.torch_build"] == "none" and facts["cuda.toolkit"] == "12.8.93"


def test_installed_torchs_version_file_is_read_without_importing_torch():
    import torch
    code = (
        "import json, sys; from ptebuild.backends.cuda import toolchain; "
        "fields = toolchain.torch_version_fields(); "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(json.dumps(fields))"
    )
    fields = json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    assert fields["__version__"] == torch.__version__
    assert fields["cuda"] == torch.version.cuda


def _gpu_manifest() -> dict:
    return json.loads((DATA / "MANIFEST.json").read_text())


def test_committed_gpu_data_names_a_cuda_build_of_torch(tmp_path, dist_torch):
    """What ``data/MANIFEST.json`` proves: the H200's torch said ``2.11.0+cu130`` (its
    ``torch.__version__``, which is ``version.py``'s), so the facts read from that file name
    its CUDA build. The toolkit torch was built with (``torch.version.cuda``) is not recorded
    there; the fake file's ``13.0`` stands for it."""
    recorded = _gpu_manifest()["torch"]
    local = recorded.partition("+")[2]
    assert local.startswith("cu"), recorded
    search = _fake_torch(tmp_path / "site", GPU_TORCH_VERSION_PY.replace("2.11.0+cu130", recorded))
    assert toolchain.toolchain_facts({}, torch_search_path=[search])["cuda.torch_build"] == local


def test_committed_gpu_toolchain_facts_are_not_placeholders():
    manifest = _gpu_manifest()
    facts = manifest["toolchain"]
    assert facts["cuda.torch_build"] == manifest["torch"].partition("+")[2]
    assert facts["cuda.toolkit"] not in ("", "none", "unknown")


def test_windows_names_a_missing_cuda_runtime(monkeypatch, tmp_path):
    fake = tmp_path / toolchain.MINGW_GXX
    fake.write_text("#!/bin/sh\necho 'Thread model: posix' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("WINDOWS_CUDA_HOME", raising=False)
    assert toolchain.windows_toolchain_problem().startswith("WINDOWS_CUDA_HOME is not set")
    monkeypatch.setenv("WINDOWS_CUDA_HOME", str(tmp_path))
    assert toolchain.windows_toolchain_problem() == f"WINDOWS_CUDA_HOME={tmp_path} has no include/cuda_runtime.h"
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime.h").write_text("")
    assert toolchain.windows_toolchain_problem() == f"WINDOWS_CUDA_HOME={tmp_path} has no lib/x64/cudart.lib"
    (tmp_path / "lib" / "x64").mkdir(parents=True)
    (tmp_path / "lib" / "x64" / "cudart.lib").write_text("")
    assert toolchain.windows_toolchain_problem().startswith(f"WINDOWS_CUDA_HOME={tmp_path} has no bin/x64/cudart64_*.dll")
    (tmp_path / "bin" / "x86_64").mkdir(parents=True)
    (tmp_path / "bin" / "x86_64" / "cudart64_13.dll").write_text("")  # the PyPI wheel's layout
    assert toolchain.windows_toolchain_problem() is None
    fake.write_text("#!/bin/sh\necho 'Thread model: win32' >&2\n")
    assert "win32-threads flavour" in toolchain.windows_toolchain_problem()
