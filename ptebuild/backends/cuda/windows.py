"""The Windows side of the CUDA backend: the MinGW link folder, and a check of the DLL it makes.

AOTInductor cross-compiles a Windows program's code with MinGW-w64 and links it with
``-laoti_cuda_shims -lcuda -lcudart``, searching ExecuTorch's ``shim_library_path`` before
``$WINDOWS_CUDA_HOME/lib/x64``. The CUDA toolkit's ``cudart.lib`` there is an MSVC library whose
static loader objects need MSVC's /GS symbols (``__security_cookie``, ``__GSHandlerCheck``):
seen on the H200 (torch 2.11, MinGW-w64 GCC 12), that link failed. So :func:`link_folder` makes
the folder passed as ``shim_library_path``: a copy of the shim import library, and
``libcudart.a``, a plain import library of the toolkit's ``cudart64_*.dll`` made from the DLL's
own export table (:mod:`ptebuild.shims.pe`, written by :mod:`ptebuild.shims.coff`); MinGW's ld
takes it from that earlier folder. The same link asks for ``-Wl,-Bstatic -lwinpthread`` before
the libraries, but libstdc++ and libgcc_eh need pthreads after them, and the driver's closing
``-lpthread`` then takes the DLL's import library: the program would need
``libwinpthread-1.dll`` on the user's machine (reproduced here with MinGW-w64 GCC 12). The
folder's ``libpthread.a`` is MinGW's static winpthread, so that ``-lpthread`` links it in. The
folder's path follows from its contents alone: the program's code records its link command.

The check (:func:`check_windows_program`, ``"windows-imports"``). No Windows machine with a GPU
is at hand, so the DLL cannot run; what decides whether it loads on one is checked instead: the
``.pte``'s weight keys against the ``.ptd`` (pure Python), each method's DLL is an x86-64 DLL,
every name it imports from the shim DLL is exported by the shim import library it was linked
against, every name it imports from the CUDA runtime is exported by that ``cudart64_*.dll``,
and it imports no MinGW runtime DLL (``libstdc++-6.dll`` and the like are not on a user's
machine).
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ptebuild.shims.model import ExportType

SHIM_LIBRARY_NAME = "aoti_cuda_shims"
CUDART_IMPORT_LIBRARY = "libcudart.a"
STATIC_PTHREAD = "libpthread.a"
CHECK_NAME = "windows-imports"
MINGW_RUNTIME_DLLS = ("libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll", "libgomp-1.dll")


def cudart_dll(windows_cuda_home: str | os.PathLike) -> Path | None:
    """The CUDA runtime DLL of a Windows CUDA tree (toolkit: ``bin/``; PyPI wheel: ``bin/x86_64/``)."""
    for pattern in ("bin/x64/cudart64_*.dll", "bin/x86_64/cudart64_*.dll", "bin/cudart64_*.dll"):
        found = sorted(glob.glob(os.path.join(windows_cuda_home, pattern)))
        if found:
            return Path(found[-1])
    return None


def dll_exports(path: Path) -> dict[str, ExportType]:
    from ptebuild.shims.pe import PeImage

    return PeImage(path.read_bytes(), str(path)).exports()


def cudart_import_library(dll: Path) -> bytes:
    """MinGW's import library for ``dll`` (every name it exports, code or data)."""
    from ptebuild.shims import Export, ShimList, write_import_library

    exports = tuple(Export(name, kind) for name, kind in sorted(dll_exports(dll).items()))
    return write_import_library(ShimList(dll.name, exports), "gnu")


def static_winpthread(mingw_gxx: str) -> bytes | None:
    """MinGW's static ``libwinpthread.a``, or None if the compiler has none."""
    try:
        done = subprocess.run([mingw_gxx, "-print-file-name=libwinpthread.a"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    path = Path(done.stdout.strip())
    return path.read_bytes() if path.is_absolute() and path.is_file() else None


def link_folder(shim_dir: str | os.PathLike, windows_cuda_home: str | os.PathLike, root: str | os.PathLike,
                mingw_gxx: str | None = None) -> Path:
    """A folder under ``root`` holding ``aoti_cuda_shims.lib`` (from ``shim_dir``),
    ``libcudart.a`` and, when ``mingw_gxx`` has one, ``libpthread.a`` (its static winpthread);
    named by the digest of them all, written atomically, reused when present."""
    from ptebuild.errors import BuildError

    dll = cudart_dll(windows_cuda_home)
    if dll is None:
        raise BuildError(f"WINDOWS_CUDA_HOME={windows_cuda_home} has no bin/x64/cudart64_*.dll; point it at an unzipped "
                         "Windows CUDA runtime (the nvidia-cuda-runtime win_amd64 wheel)")
    files = {
        f"{SHIM_LIBRARY_NAME}.lib": Path(shim_dir, f"{SHIM_LIBRARY_NAME}.lib").read_bytes(),
        CUDART_IMPORT_LIBRARY: cudart_import_library(dll),
    }
    winpthread = static_winpthread(mingw_gxx) if mingw_gxx else None
    if winpthread is not None:
        files[STATIC_PTHREAD] = winpthread
    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    folder = Path(root, "ptebuild-windows-link", digest.hexdigest()[:24])
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        target = folder / name
        if target.is_file() and target.read_bytes() == data:
            continue
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, target)
    return folder


@dataclasses.dataclass(frozen=True)
class DllFigures:
    """What the check found in one method's DLL."""

    method: str
    dll_bytes: int
    imports: dict[str, int]

    def to_json(self) -> dict:
        return {"method": self.method, "dll_bytes": self.dll_bytes, "imports": dict(sorted(self.imports.items()))}


def check_windows_program(program, pte: Path, ptd: Path | None, shim_dir: str | os.PathLike | None,
                          windows_cuda_home: str | os.PathLike | None) -> list[DllFigures]:
    """Check each method's DLL in ``pte`` against the libraries it was linked with.

    Raises CheckError for a DLL that would not load, BuildError when the libraries are not given.
    """
    from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
    from ptebuild.errors import BuildError
    from ptebuild.runtime import check as check_files
    from ptebuild.shims.reader import read_import_library

    where = f"programs.{program.name}"
    check_files(pte, [ptd] if ptd else [], verify_bytes=True)
    library = Path(shim_dir or "", f"{SHIM_LIBRARY_NAME}.lib")
    if not shim_dir or not library.is_file():
        raise BuildError(f"the Windows check needs {SHIM_LIBRARY_NAME}.lib, not found in {shim_dir or 'no folder'}; "
                         "build the shim target first",
                         location=where)
    shims = read_import_library(library.read_bytes(), str(library))
    dll = cudart_dll(windows_cuda_home) if windows_cuda_home else None
    if dll is None:
        raise BuildError(f"the Windows check needs the CUDA runtime DLL, not found at WINDOWS_CUDA_HOME={windows_cuda_home}; "
                         "point it at an unzipped Windows CUDA runtime",
                         location=where)
    exported = {shims.dll: shims.names(), dll.name: set(dll_exports(dll))}
    figures = []
    for delegate in read_cuda_delegates(pte):
        data = read_pte_named_data(pte, delegate.payload.so_blob_key)
        imports = check_dll(data, f"{pte.name}: method {delegate.method!r}", exported, shims.dll, where)
        figures.append(DllFigures(delegate.method, len(data), imports))
    return figures


def check_dll(data: bytes, label: str, exported: dict[str, set[str]], shim_dll: str, where: str | None = None) -> dict[str, int]:
    """Would this DLL load next to ``exported`` (DLL name -> the names it exports)? Returns how
    many names it imports from each DLL; raises CheckError (FormatError for a damaged image)."""
    from ptebuild.errors import REPORT, CheckError
    from ptebuild.shims.pe import MACHINE_AMD64, PeImage

    image = PeImage(data, label)
    if image.machine != MACHINE_AMD64 or not image.is_dll:
        raise CheckError(f"{label}: compiled code is not an x86-64 Windows DLL (machine 0x{image.machine:x}); {REPORT}",
                         location=where)
    known = {name.lower(): names for name, names in exported.items()}
    imports = image.imports()
    for imported, names in imports.items():
        if imported.lower() in MINGW_RUNTIME_DLLS:
            raise CheckError(
                f"{label}: the DLL needs {imported}, a MinGW runtime DLL that Windows machines lack; link it statically",
                location=where)
        offered = known.get(imported.lower())
        missing = sorted(str(name) for name in names if offered is not None and name not in offered)
        if missing:
            listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            them = "it" if len(missing) == 1 else "them"
            fix = (f"; add {them} to the shim list" if imported.lower() == shim_dll.lower()
                   else f"; build with the {imported} that exports {them}")
            raise CheckError(f"{label}: the DLL imports {listed} from {imported}, which does not export {them}{fix}",
                             location=where)
    return {name: len(names) for name, names in imports.items()}
