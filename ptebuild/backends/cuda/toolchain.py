"""Cheap machine facts for the CUDA backend: its key facts and what this machine can build.

Nothing here imports torch (nor pydantic): the builder calls these for every CUDA program.

Key facts (:func:`toolchain_facts`, read without importing torch): torch's CUDA build (the
``+cuXYZ`` of its version) and the CUDA version torch was built with, both from torch's own
``torch/version.py`` read as text (:func:`torch_version_fields`: a wheel's dist-info may carry
no ``+cuXYZ``, as PyPI's default CUDA build does not), else from the dist-info version and the
toolkit's ``version.json`` under ``CUDA_HOME``; the CUDA runtime wheel's version, Triton's
version, the GPU architectures compiled for (``TORCH_CUDA_ARCH_LIST``, else ``nvidia-smi
--query-gpu=compute_cap``: ExecuTorch compiles for the current device's capability), and the
compile specs; for a Windows program also the MinGW compiler, the Windows CUDA runtime DLL and
the ``SOURCE_DATE_EPOCH`` its link is stamped with.
"""

from __future__ import annotations

import ast
import functools
import glob
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from ptebuild.backends.cuda import conv_transpose, windows
from ptebuild.backends.cuda.inductor import FIXED_SOURCE_DATE_EPOCH
from ptebuild.backends.cuda.options import compile_specs, platform_of

MINGW_GXX = "x86_64-w64-mingw32-g++"


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def _nvidia_smi_compute_caps() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    caps = sorted({line.strip() for line in out.splitlines() if line.strip()})
    return ";".join(caps) or None


def gpu_visible() -> bool:
    """A CUDA GPU this process may use: a device node (or nvidia-smi), not hidden by the env."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None


def _cuda_toolkit_version() -> str | None:
    candidates = [os.environ[var] for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    candidates.append("/usr/local/cuda")
    for home in candidates:
        try:
            data = json.loads(Path(home, "version.json").read_text())
            return str(data["cuda"]["version"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def torch_version_file(search_path: Sequence[str | os.PathLike] | None = None) -> Path | None:
    """The installed torch package's ``torch/version.py``, found as an import would find torch
    (on ``search_path``, else ``sys.path`` and the import hooks), without importing it."""
    try:
        if search_path is None:
            spec = importlib.util.find_spec("torch")
        else:
            spec = importlib.machinery.PathFinder.find_spec("torch", [os.fspath(p) for p in search_path])
    except (ImportError, ValueError):  # ValueError: a torch in sys.modules without a spec
        return None
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder, "version.py")
        if path.is_file():
            return path
    return None


def torch_version_fields(search_path: Sequence[str | os.PathLike] | None = None) -> dict[str, str | None]:
    """The constant fields of torch's ``torch/version.py`` (``__version__``, ``cuda``, ...), parsed
    as text: ``{}`` where there is no torch or the file cannot be read.

    torch writes that file when it is built: ``__version__ = '2.11.0+cu130'`` and
    ``cuda: Optional[str] = '13.0'`` (``None`` in a CPU build), whatever version its dist-info says.
    """
    path = torch_version_file(search_path)
    if path is None:
        return {}
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError):
        return {}
    fields: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) \
                and (value.value is None or isinstance(value.value, str)):
            fields[target.id] = value.value
    return fields


def _local_version(version: str | None) -> str | None:
    """The local part of a version (``cu130`` of ``2.11.0+cu130``), None if it has none."""
    return (version or "").partition("+")[2] or None


def windows_facts() -> dict[str, str]:
    """What else changes a Windows program's code: the MinGW compiler and the CUDA runtime DLL."""
    facts = {
        "cuda.mingw": "none",
        "cuda.windows_cudart": "none",
        "cuda.source_date_epoch": os.environ.get("SOURCE_DATE_EPOCH") or FIXED_SOURCE_DATE_EPOCH,
    }
    gxx = shutil.which(MINGW_GXX)
    if gxx:
        try:
            done = subprocess.run([gxx, "-dumpfullversion", "-dumpversion"], capture_output=True, text=True, timeout=20)
            facts["cuda.mingw"] = done.stdout.strip() or "unknown"
        except (OSError, subprocess.SubprocessError):
            facts["cuda.mingw"] = "unknown"
    home = os.environ.get("WINDOWS_CUDA_HOME")
    dll = windows.cudart_dll(home) if home else None
    if dll is not None:
        import hashlib

        facts["cuda.windows_cudart"] = f"{dll.name}:{hashlib.sha256(dll.read_bytes()).hexdigest()}"
    return facts


def toolchain_facts(options, torch_search_path: Sequence[str | os.PathLike] | None = None) -> dict[str, str]:
    """The CUDA backend's key facts for a program with ``options`` (validated model or plain dict).

    ``torch_search_path``: where to look for torch's ``version.py`` (default: where an import of
    torch would find it).
    """
    built = torch_version_fields(torch_search_path)
    torch_build = _local_version(built.get("__version__")) or _local_version(_dist_version("torch"))
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or _nvidia_smi_compute_caps() or "none"
    return {
        "cuda.torch_build": torch_build or "none",
        "cuda.runtime": _dist_version("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12") or "none",
        "cuda.toolkit": built.get("cuda") or _cuda_toolkit_version() or "none",
        "cuda.triton": _dist_version("triton", "pytorch-triton") or "none",
        "cuda.gpu_arch": arch,
        "cuda.compile_specs": json.dumps(compile_specs(options), sort_keys=True, separators=(",", ":")),
        "cuda.fixes": conv_transpose.FIX,
        **(windows_facts() if platform_of(options) == "windows" else {}),
    }


def windows_toolchain_problem() -> str | None:
    """What the Windows cross toolchain lacks on this machine (one line), or None."""
    gxx = shutil.which(MINGW_GXX)
    if gxx is None:
        return (
            f"{MINGW_GXX} not found: install MinGW-w64 with POSIX threads "
            "(Debian: g++-mingw-w64-x86-64-posix)"
        )
    try:
        version = subprocess.run([gxx, "-v"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{MINGW_GXX} does not run: {exc}"
    if "Thread model: posix" not in version:
        return (
            f"{gxx} is the win32-threads flavour; AOTInductor needs POSIX threads "
            "(update-alternatives --set x86_64-w64-mingw32-g++ /usr/bin/x86_64-w64-mingw32-g++-posix)"
        )
    home = os.environ.get("WINDOWS_CUDA_HOME")
    if not home:
        return "WINDOWS_CUDA_HOME is not set: point it at a Windows CUDA runtime (include/, lib/x64/cudart.lib)"
    if not Path(home, "include", "cuda_runtime.h").is_file():
        return f"WINDOWS_CUDA_HOME={home} has no include/cuda_runtime.h"
    if not (Path(home, "lib", "x64", "cudart.lib").is_file() or Path(home, "lib", "cudart.lib").is_file()):
        return f"WINDOWS_CUDA_HOME={home} has no lib/x64/cudart.lib"
    if windows.cudart_dll(home) is None:
        return (f"WINDOWS_CUDA_HOME={home} has no bin/x64/cudart64_*.dll (MinGW's import library for the CUDA "
                "runtime is made from it)")
    return None
