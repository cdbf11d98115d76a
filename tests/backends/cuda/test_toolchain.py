"""The CUDA backend's cheap machine facts (:mod:`ptebuild.backends.cuda.toolchain`), read without torch.

A program's key facts name its compile specs (defaults filled in), the GPU architectures it is
compiled for (``TORCH_CUDA_ARCH_LIST``, else nvidia-smi's compute capabilities), the CUDA
toolkit (torch's, else ``CUDA_HOME``'s, else ``CUDA_PATH``'s) and, for a Windows program only,
the MinGW compiler, the Windows CUDA runtime DLL by content and the link's timestamp. torch's
``version.py`` is read for its constant string fields only. A GPU hidden by
``CUDA_VISIBLE_DEVICES`` is not visible; the Windows cross toolchain names what it lacks.
Issue 19's facts (torch's CUDA build from ``version.py``) are ``tests/cuda/test_cuda_toolchain.py``'s.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import unavailable

from ptebuild.backends.cuda import conv_transpose, toolchain
from ptebuild.backends.cuda.inductor import FIXED_SOURCE_DATE_EPOCH
from ptebuild.backends.cuda.options import options_model

WINDOWS = {"platform": "windows", "shim_library": "aoti_cuda_shims"}
WINDOWS_KEYS = {"cuda.mingw", "cuda.windows_cudart", "cuda.source_date_epoch"}


def torch_folder(root: Path, version_py: str | bytes) -> Path:
    """A folder to search holding a ``torch`` package whose ``version.py`` is ``version_py``."""
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ImportError("torch was imported")\n')
    target = package / "version.py"
    target.write_bytes(version_py) if isinstance(version_py, bytes) else target.write_text(version_py)
    return root


def executable(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return path


@pytest.fixture
def no_smi_cache():
    """nvidia-smi is asked once per process: forget its answer around a test that changes PATH."""
    toolchain._nvidia_smi_compute_caps.cache_clear()
    yield
    toolchain._nvidia_smi_compute_caps.cache_clear()


def real_mingw() -> str:
    found = shutil.which(toolchain.MINGW_GXX)
    if found is None:
        unavailable(f"{toolchain.MINGW_GXX} not found; install the Debian package g++-mingw-w64-x86-64-posix")
    return found


def test_the_compile_specs_and_the_fix_are_key_facts(tmp_path):
    cpu = torch_folder(tmp_path / "cpu", "__version__ = '2.13.0+cpu'\ncuda = None\n")
    facts = toolchain.toolchain_facts({}, torch_search_path=[cpu])
    assert json.loads(facts["cuda.compile_specs"]) == {"platform": "linux", "low_memory_mode": "OFF", "max_autotune": "OFF",
                                                       "emulate_precision_casts": "ON", "triton_kernel_mode": "ON"}
    assert facts["cuda.compile_specs"] == json.dumps(json.loads(facts["cuda.compile_specs"]), sort_keys=True, separators=(",", ":"))
    assert facts["cuda.fixes"] == conv_transpose.FIX
    assert facts["cuda.torch_build"] == "cpu"
    typed = options_model().model_validate({"max_autotune": True})
    assert json.loads(toolchain.toolchain_facts(typed, torch_search_path=[cpu])["cuda.compile_specs"])["max_autotune"] == "ON"
    assert not WINDOWS_KEYS & set(facts)  # a Linux program's key names no Windows toolchain


def test_the_arch_list_of_the_environment_comes_first(tmp_path, monkeypatch, no_smi_cache):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    executable(tmp_path / "bin", "nvidia-smi", "echo 7.5\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert toolchain.toolchain_facts({}, torch_search_path=[tmp_path])["cuda.gpu_arch"] == "8.0;9.0"


def test_without_an_arch_list_the_gpus_compute_capabilities_are_asked(tmp_path, monkeypatch, no_smi_cache):
    """ExecuTorch compiles for the current device's capability: what ``nvidia-smi`` says, each once."""
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    executable(tmp_path / "bin", "nvidia-smi", 'test "$1" = --query-gpu=compute_cap || exit 3\nprintf "9.0\\n8.6\\n\\n7.5\\n8.0\\n9.0\\n"\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert toolchain.toolchain_facts({}, torch_search_path=[tmp_path])["cuda.gpu_arch"] == "7.5;8.0;8.6;9.0"


def test_an_arch_is_none_where_nothing_says_one(tmp_path, monkeypatch, no_smi_cache):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    executable(tmp_path / "bin", "nvidia-smi", "echo 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert toolchain.toolchain_facts({}, torch_search_path=[tmp_path])["cuda.gpu_arch"] == "none"


@pytest.mark.parametrize(("hidden", "visible"), [("", False), ("-1", False), ("none", False), ("NoDevFiles", False), ("0", True),
                                                 (None, True)])
def test_a_gpu_hidden_by_the_environment_is_not_visible(tmp_path, monkeypatch, hidden, visible):
    executable(tmp_path / "bin", "nvidia-smi", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    if hidden is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
    assert toolchain.gpu_visible() is visible


def test_the_toolkit_is_torchs_else_cuda_homes_else_cuda_paths(tmp_path, monkeypatch):
    cpu = torch_folder(tmp_path / "cpu", "__version__ = '2.13.0'\ncuda = None\n")
    home, path = tmp_path / "home", tmp_path / "path"
    for folder, version in ((home, "12.8.93"), (path, "12.4.1")):
        folder.mkdir()
        (folder / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": version}}))
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("CUDA_PATH", str(path))
    assert toolchain.toolchain_facts({}, torch_search_path=[cpu])["cuda.toolkit"] == "12.8.93"
    (home / "version.json").write_text('{"cuda": {"name": "CUDA SDK"}}')  # no version: the next place is asked
    assert toolchain.toolchain_facts({}, torch_search_path=[cpu])["cuda.toolkit"] == "12.4.1"
    monkeypatch.delenv("CUDA_HOME")
    assert toolchain.toolchain_facts({}, torch_search_path=[cpu])["cuda.toolkit"] == "12.4.1"
    gpu = torch_folder(tmp_path / "gpu", "__version__ = '2.11.0+cu130'\ncuda = '13.0'\n")
    assert toolchain.toolchain_facts({}, torch_search_path=[gpu])["cuda.toolkit"] == "13.0"


def test_torchs_version_file_gives_its_constant_strings_only(tmp_path):
    search = torch_folder(tmp_path / "site", (
        "from typing import Optional\n"
        "__version__ = '2.11.0+cu128'\n"
        "debug = False\n"
        "cuda: Optional[str] = '12.8'\n"
        "hip: Optional[str] = None\n"
        "git_version = compute()\n"
        "a, b = 'x', 'y'\n"
        "xpu: Optional[str]\n"
    ))
    assert toolchain.torch_version_fields([search]) == {"__version__": "2.11.0+cu128", "cuda": "12.8", "hip": None}


@pytest.mark.parametrize("content", [b"__version__ = '\xff'\n", b"__version__ = '2.11\n"], ids=["not-utf-8", "syntax-error"])
def test_an_unreadable_version_file_gives_nothing(tmp_path, content):
    assert toolchain.torch_version_fields([torch_folder(tmp_path / "site", content)]) == {}


def test_a_torch_that_is_one_module_or_has_no_version_file_gives_nothing(tmp_path):
    (tmp_path / "module").mkdir()
    (tmp_path / "module" / "torch.py").write_text("__version__ = '2.11.0+cu130'\n")
    assert toolchain.torch_version_file([tmp_path / "module"]) is None
    package = tmp_path / "package" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert toolchain.torch_version_file([tmp_path / "package"]) is None
    assert toolchain.torch_version_fields([tmp_path / "package"]) == {}


def test_a_windows_programs_facts_name_mingw_the_cuda_runtime_and_the_timestamp(tmp_path, monkeypatch):
    gxx = real_mingw()
    version = subprocess.run([gxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, check=True).stdout.strip()
    dll = tmp_path / "cuda" / "bin" / "x64" / "cudart64_12.dll"
    dll.parent.mkdir(parents=True)
    dll.write_bytes(b"MZ" + bytes(range(256)) * 4)
    monkeypatch.setenv("WINDOWS_CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    facts = toolchain.toolchain_facts(WINDOWS, torch_search_path=[tmp_path])
    assert facts["cuda.mingw"] == version and version
    assert facts["cuda.windows_cudart"] == f"cudart64_12.dll:{hashlib.sha256(dll.read_bytes()).hexdigest()}"
    assert facts["cuda.source_date_epoch"] == FIXED_SOURCE_DATE_EPOCH
    assert json.loads(facts["cuda.compile_specs"])["platform"] == "windows"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert toolchain.windows_facts()["cuda.source_date_epoch"] == "1700000000"


def test_a_windows_toolchain_that_is_not_here_is_none_in_the_facts(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no MinGW on it
    monkeypatch.delenv("WINDOWS_CUDA_HOME", raising=False)
    facts = toolchain.windows_facts()
    assert (facts["cuda.mingw"], facts["cuda.windows_cudart"]) == ("none", "none")


def test_what_the_windows_cross_toolchain_lacks(tmp_path, monkeypatch):
    """With the real MinGW-w64 (POSIX threads), a Windows CUDA tree in the toolkit's layout will do."""
    gxx = real_mingw()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert toolchain.windows_toolchain_problem() == ("x86_64-w64-mingw32-g++ not found: install MinGW-w64 with POSIX threads "
                                                     "(Debian: g++-mingw-w64-x86-64-posix)")
    monkeypatch.setenv("PATH", str(Path(gxx).parent))
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime.h").write_text("")
    (home / "lib").mkdir()
    (home / "lib" / "cudart.lib").write_bytes(b"!<arch>\n")  # the toolkit's layout: lib/, not lib/x64
    monkeypatch.setenv("WINDOWS_CUDA_HOME", str(home))
    assert toolchain.windows_toolchain_problem() == (f"WINDOWS_CUDA_HOME={home} has no bin/x64/cudart64_*.dll (MinGW's import "
                                                     "library for the CUDA runtime is made from it)")
    (home / "bin").mkdir()
    (home / "bin" / "cudart64_13.dll").write_bytes(b"MZ")  # the toolkit's layout: bin/
    assert toolchain.windows_toolchain_problem() is None
