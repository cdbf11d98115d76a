"""``ptebuild diff``: which part of two ``.pte`` or ``.ptd`` files differs (see :mod:`ptebuild.runtime.diff`).

Imports neither torch nor executorch.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers
    from ptebuild.release.diff import BundleDiff


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="say which part of two .pte or .ptd files differs, or what changed between two bundles or output folders",
        description=(
            "Compare A and B part by part and print one line per part that differs. Given two bundles "
            "(.tar.gz, .tgz, .zip written by `ptebuild pack`), read without unpacking, or two output "
            "folders of `ptebuild build`: one line per program (same bytes; new weights only: its .pte is "
            "byte-identical; new program and weights: the same plan with other weights, whose SHA-256 keys "
            "change the .pte too; changed; new program; removed) with its size before and after and, where "
            "it changed, the files a device must replace and why; then, for the programs in both, the "
            "change of their figures (.pte and .ptd bytes, delegated fraction, planned memory, the check's "
            "worst error and lowest cosine), marked where it grew or fell back to kernels; then the "
            "operators added or dropped and the other files that differ. Exit 0 if they are the same, 1 if "
            "they differ, 2 if either cannot be read."
        ),
    )
    parser.add_argument("a", metavar="A", help="a .pte or .ptd file, a bundle or an output folder (the old release)")
    parser.add_argument("b", metavar="B", help="the file to compare it with (the new release)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=diff_command)


def diff_command(args: argparse.Namespace) -> int:
    from ptebuild.api.inspect import diff
    from ptebuild.release.diff import BundleDiff

    report = diff(args.a, args.b)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif isinstance(report, BundleDiff):
        _print_bundles(report)
    elif report.same:
        print(f"{report.a} and {report.b} are identical")
    else:
        for difference in report.differences:
            print(difference)
        print(f"{len(report.differences)} differences between {report.a} and {report.b}")
    return 0 if report.same else 1


def _print_bundles(report: BundleDiff) -> None:
    width = max((len(p.name) for p in report.programs), default=0)
    words = max((len(p.change.words) for p in report.programs), default=0)
    for program in report.programs:
        sizes = f"{_size(program.size_before)} -> {_size(program.size_after)}"
        ship = ""
        if program.change.value not in ("same", "added", "removed"):
            ship = f"  ship {', '.join(program.ship) or 'nothing'}" + (f"  ({program.why})" if program.why else "")
        print(f"{program.name.ljust(width)}  {program.change.words.ljust(words)}  {sizes}{ship}")
    changed = [(p.name, p.figures.lines(), p.figures.worse()) for p in report.programs if p.figures is not None and p.figures.lines()]
    if changed:
        print("figures:")
        for name, lines, worse in changed:
            print(f"  {name}: {'; '.join(lines)}" + (f"  [{', '.join(worse)}]" if worse else ""))
    if report.operators_added or report.operators_removed:
        changes = [f"+{op}" for op in report.operators_added] + [f"-{op}" for op in report.operators_removed]
        print(f"operators: {', '.join(changes)}")
    for line in report.files:
        print(line)
    differ = sum(1 for p in report.programs if p.change.value != "same")
    verdict = "the same" if report.same else f"{differ} of {len(report.programs)} programs differ"
    print(f"{verdict}: {report.a} -> {report.b}")


def _size(size: int | None) -> str:
    return "-" if size is None else f"{size} bytes"
