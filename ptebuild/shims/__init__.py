"""Windows import libraries for the CUDA backend's shim DLL, built from a text list.

Public API (no torch, no executorch):

- :func:`load_shim_list` reads a ``.def`` or ``.toml`` shim list.
- :func:`write_import_library` writes a deterministic COFF x86-64 import library.
- :func:`read_import_library` reads one back (LLVM- or MSVC-made).
"""

from ptebuild.shims.coff import write_import_library
from ptebuild.shims.deffile import format_def, format_toml, load_shim_list, parse_def, parse_toml
from ptebuild.shims.model import Export, ShimList

__all__ = [
    "Export",
    "ShimList",
    "format_def",
    "format_toml",
    "load_shim_list",
    "parse_def",
    "parse_toml",
    "read_import_library",
    "write_import_library",
]


def __getattr__(name: str) -> object:
    # The reader is imported on first use so that writing never pays for it.
    if name == "read_import_library":
        from ptebuild.shims.reader import read_import_library

        return read_import_library
    raise AttributeError(name)
