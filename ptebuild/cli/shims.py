"""``ptebuild shims``: build, read, merge and check the Windows import library of a shim DLL."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from ptebuild.errors import UsageError

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    from ptebuild.cli.parser import Subparsers
    from ptebuild.shims.model import ShimList

EXIT_OK, EXIT_FAILED = 0, 1
LAYOUTS = ("gnu", "coff")


def register(subparsers: Subparsers) -> None:
    from ptebuild.cli.parser import Parser

    parser = subparsers.add_parser(
        "shims", help="build, read, merge and check the shim DLL's import library (.lib)",
        description="Windows import libraries (aoti_cuda_shims.lib) as a build output of a text list.",
    )
    commands = parser.add_subparsers(dest="shims_command", metavar="SUBCOMMAND", parser_class=Parser)
    commands.required = True

    build = commands.add_parser("build", help="write an import library from a .def or .toml shim list")
    build.add_argument("source", type=Path, metavar="SRC", help="shim list (.def or .toml)")
    build.add_argument("-o", "--output", type=Path, required=True, metavar="OUT.lib")
    build.add_argument("--format", choices=LAYOUTS, default="gnu", help="gnu: llvm-dlltool 14-18; coff: lib.exe, LLVM >= 19")
    build.add_argument("--keep-order", action="store_true", help="keep source order and duplicates (as llvm-dlltool)")
    build.add_argument("--dll", metavar="NAME", help="DLL name, overriding LIBRARY (llvm-dlltool -D)")
    build.set_defaults(handler=build_command)

    listing = commands.add_parser("list", help="print the DLL and exports of an import library")
    listing.add_argument("library", type=Path, metavar="LIB")
    listing.set_defaults(handler=list_command)

    deffile = commands.add_parser("def", help="write the .def file of an import library")
    deffile.add_argument("library", type=Path, metavar="LIB")
    deffile.add_argument("-o", "--output", type=Path, metavar="OUT.def", help="default: standard output")
    deffile.set_defaults(handler=def_command)

    merge = commands.add_parser("merge", help="three-way merge of export sets (a git merge driver)")
    merge.add_argument("base", type=Path, metavar="BASE")
    merge.add_argument("ours", type=Path, metavar="OURS")
    merge.add_argument("theirs", type=Path, metavar="THEIRS")
    merge.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                       help=".def or .toml writes a list; anything else an import library")
    merge.add_argument("--format", choices=LAYOUTS, help="library layout (default: that of OURS, else gnu)")
    merge.set_defaults(handler=merge_command)

    driver = commands.add_parser("install-merge-driver", help="let git merge *.lib import libraries by their exports")
    driver.add_argument("--repo", type=Path, default=Path("."), help="repository (default: current directory)")
    driver.add_argument("--pattern", default="*.lib", help="gitattributes pattern (default: *.lib)")
    driver.set_defaults(handler=install_merge_driver_command)

    check = commands.add_parser("check", help="verify an import library and a shared library against a shim list")
    check.add_argument("--list", type=Path, required=True, dest="shim_list", metavar="SRC")
    check.add_argument("--lib", type=Path, metavar="X.lib", help="import library that must list exactly the shims")
    check.add_argument("--so", type=Path, metavar="LIBRARY", help="built .so (ELF) or .dll (PE) that must define every shim")
    check.set_defaults(handler=check_command)


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}; give the path of a .lib, .def or shim list") from None


def _write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same folder, so a reader never sees half a file."""
    try:
        directory = path.parent if str(path.parent) else Path(".")
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot write: {exc.strerror}; give a path in a folder you can write to") from None


def _load_any(path: Path) -> tuple[ShimList, str | None]:
    """A shim list and its library layout (None for text) from a .lib, .def or .toml file."""
    from ptebuild.shims.coff import ARCHIVE_MAGIC
    from ptebuild.shims.deffile import parse_shim_text
    from ptebuild.shims.reader import inspect_import_library

    data = _read_bytes(path)
    if data.startswith(ARCHIVE_MAGIC) or path.suffix.lower() == ".lib":
        library = inspect_import_library(data, str(path))
        return library.shims, library.layout
    return parse_shim_text(data, str(path)), None


def build_command(args: argparse.Namespace) -> int:
    from ptebuild.shims import load_shim_list, write_import_library

    shims = load_shim_list(args.source, dll=args.dll)
    _write_bytes(args.output, write_import_library(shims, args.format, keep_order=args.keep_order))
    exports = shims.exports if args.keep_order else shims.canonical().exports
    count = sum(not export.private for export in exports)
    print(f"wrote {args.output} ({args.format}, {shims.dll}, {count} exports)", file=sys.stderr)
    return EXIT_OK


def list_command(args: argparse.Namespace) -> int:
    from ptebuild.shims.reader import inspect_import_library

    library = inspect_import_library(_read_bytes(args.library), str(args.library))
    print(f"{library.shims.dll} ({library.layout} layout, {len(library.shims.exports)} exports)")
    for export in library.shims.exports:
        line = f"{export.type:<5}  {export.name}"
        if export.noname:
            line += f"  ordinal {export.ordinal}"
        elif export.ordinal is not None:
            line += f"  hint {export.ordinal}"
        print(line)
    return EXIT_OK


def def_command(args: argparse.Namespace) -> int:
    from ptebuild.shims.deffile import format_def
    from ptebuild.shims.reader import read_import_library

    text = format_def(read_import_library(_read_bytes(args.library), str(args.library)))
    if args.output is None:
        sys.stdout.write(text)
    else:
        _write_bytes(args.output, text.encode("utf-8"))
    return EXIT_OK


def merge_command(args: argparse.Namespace) -> int:
    from ptebuild.shims import write_import_library
    from ptebuild.shims.deffile import format_def, format_toml
    from ptebuild.shims.merge import merge_shim_lists

    base, _ = _load_any(args.base)
    ours, our_layout = _load_any(args.ours)
    theirs, _ = _load_any(args.theirs)
    result = merge_shim_lists(base, ours, theirs)
    if result.conflicts:
        for conflict in result.conflicts:
            print(f"error: {args.ours}: merge conflict: {conflict}", file=sys.stderr)
        return EXIT_FAILED
    suffix = args.output.suffix.lower()
    if suffix == ".def":
        data = format_def(result.shims).encode("utf-8")
    elif suffix == ".toml":
        data = format_toml(result.shims).encode("utf-8")
    else:
        data = write_import_library(result.shims, args.format or our_layout or "gnu")
    _write_bytes(args.output, data)
    print(f"merged {len(result.shims.exports)} exports of {result.shims.dll} into {args.output}", file=sys.stderr)
    return EXIT_OK


def install_merge_driver_command(args: argparse.Namespace) -> int:
    from ptebuild.shims.gitdriver import DRIVER_NAME, install_merge_driver

    attributes = install_merge_driver(args.repo, args.pattern)
    print(f"configured git merge driver {DRIVER_NAME} for {args.pattern} ({attributes})", file=sys.stderr)
    return EXIT_OK


def check_command(args: argparse.Namespace) -> int:
    from ptebuild.shims import load_shim_list
    from ptebuild.shims.check import compare_with_library, compare_with_shared_library, defined_symbols
    from ptebuild.shims.reader import read_import_library

    declared = load_shim_list(args.shim_list)
    problems: list[str] = []
    if args.lib is not None:
        report = compare_with_library(declared, read_import_library(_read_bytes(args.lib), str(args.lib)))
        problems += [f"{args.lib}: missing shim {name} (declared in {args.shim_list}); rebuild the library" for name in report.missing]
        problems += [f"{args.lib}: extra shim {name} (not in {args.shim_list}); declare it or rebuild" for name in report.extra]
        problems += [f"{args.lib}: {line}; rebuild the library" for line in report.wrong_type]
    if args.so is not None:
        report = compare_with_shared_library(declared, defined_symbols(_read_bytes(args.so), str(args.so)))
        problems += [f"{args.so}: shim {name} is not defined (declared in {args.shim_list}); implement or export it" for name in report.missing]
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        return EXIT_FAILED
    checked = " and ".join(str(p) for p in (args.lib, args.so) if p is not None) or "the list itself"
    print(f"ok: {len(declared.exports)} shims of {declared.dll} checked against {checked}", file=sys.stderr)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """``python -m ptebuild.cli.shims ARGS``: the shims commands alone, e.g. for the git merge driver.

    git runs the driver for every conflicting ``.lib``; this entry point loads only this module, so
    a merge never waits for (or breaks on) the rest of ptebuild. Errors map to exit codes as in
    :func:`ptebuild.cli.main`: 2 for bad input, 1 for a failed check or conflict.
    """
    from ptebuild.cli import EXIT_USAGE
    from ptebuild.cli.parser import Parser, UsageExit
    from ptebuild.errors import PtebuildError

    parser = Parser(prog="ptebuild")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser))
    try:
        args = parser.parse_args(["shims", *(sys.argv[1:] if argv is None else argv)])
    except UsageExit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return int(args.handler(args) or 0)
    except PtebuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
