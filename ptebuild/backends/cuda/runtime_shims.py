"""Does ExecuTorch's CUDA runtime define every C shim a program's compiled code calls?

Each method of a CUDA program is a shared object (named data of the ``.pte``, key ending
``_so_blob``) built without libtorch: every ``aoti_torch_*`` function it calls is an undefined
dynamic symbol, resolved when ExecuTorch's CUDA runtime opens it with ``RTLD_LAZY``, that is at
the first call. One that the runtime lacks lowers fine, passes the build's check (PyTorch's
AOTInductor runner, which runs the same code against libtorch's shims) and crashes on the device.

ExecuTorch 1.5's lowering refuses a fallback kernel it has no shim for, but misses the ones
Inductor writes directly: scatter and ``index_put`` (checked from 1.6, pytorch/executorch#24222),
``item()`` of float16 and float64 tensors (the CUDA shims define ``aoti_torch_item_bool`` and a
few others only), and the mask-indexing shims that 1.6 adds (#24299). :func:`missing_shims`
refuses, for ExecuTorch before 1.6:

- an ``aoti_torch_cuda_<op>`` kernel shim that ExecuTorch's ``CudaBackend.get_supported_fallback_kernels``
  does not list (guards and streams are runtime shims, not kernels);
- a shim of :data:`MISSING_BEFORE_1_6`.

Symbols are read with pyelftools (the ``.dynsym`` table: undefined, global or weak).
"""

from __future__ import annotations

import io
from pathlib import Path

MISSING_BEFORE_1_6 = frozenset({
    "aoti_torch_index_put_out",
    "aoti_torch_cuda_index_Tensor",
    "aoti_torch_as_strided",
    "aoti_torch_get_size",
    "aoti_torch_item_float16",
    "aoti_torch_item_float64",
})
"""Shims that ExecuTorch 1.5's CUDA runtime does not define (1.6 adds the first four with mask
indexing, pytorch/executorch#24299; the item shims of these dtypes are in neither)."""

_RUNTIME_SHIM_PREFIXES = ("aoti_torch_cuda_guard", "aoti_torch_cuda_stream_guard")


def undefined_symbols(so: bytes) -> set[str]:
    """The undefined dynamic symbols of an ELF shared object (what the loader must find elsewhere)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(so))
    table = elf.get_section_by_name(".dynsym")
    if not isinstance(table, SymbolTableSection):
        return set()
    return {
        symbol.name for symbol in table.iter_symbols()
        if symbol.name and symbol["st_shndx"] == "SHN_UNDEF" and symbol["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
    }


def missing_shims(symbols: set[str], supported_kernels: set[str]) -> list[str]:
    """The shims of ``symbols`` that ExecuTorch 1.5's CUDA runtime does not define, sorted."""
    missing = set(symbols) & MISSING_BEFORE_1_6
    for name in symbols:
        if name.startswith("aoti_torch_cuda_") and not name.startswith(_RUNTIME_SHIM_PREFIXES) and name not in supported_kernels:
            missing.add(name)
    return sorted(missing)


def applies(executorch_version: str) -> bool:
    """The check is for ExecuTorch before 1.6 (1.6's lowering checks these kernels itself)."""
    try:
        major, minor = (int(part) for part in executorch_version.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) < (1, 6)


def supported_fallback_kernels() -> set[str]:
    """The kernel shims the installed ExecuTorch's CUDA backend declares (imports executorch)."""
    from executorch.backends.cuda.cuda_backend import CudaBackend

    return set(CudaBackend.get_supported_fallback_kernels())


def check_program_shims(pte: Path, program_name: str, supported: set[str] | None = None) -> None:
    """Refuse a program whose compiled code calls a shim ExecuTorch's CUDA runtime lacks (BuildError
    naming the method, the shims and the fix)."""
    from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
    from ptebuild.distributions import installed_versions
    from ptebuild.errors import BuildError

    version = installed_versions().get("executorch", "")
    if not applies(version):
        return
    if supported is None:
        supported = supported_fallback_kernels()
    for delegate in read_cuda_delegates(pte):
        so = read_pte_named_data(pte, delegate.payload.so_blob_key)
        missing = missing_shims(undefined_symbols(so), supported)
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            raise BuildError(
                f"method {delegate.method!r} calls C shims that ExecuTorch {version}'s CUDA runtime does not define: "
                f"{shown}; it would crash at its first call on the device (the AOTInductor runner check uses "
                "libtorch's shims and would pass): express the op another way (scatter, index_put and x[mask] "
                "lower to these) or build with an ExecuTorch that defines them",
                location=f"programs.{program_name}",
            )
