"""``ptebuild doctor``: what this machine can lower and check, per backend (:func:`ptebuild.api.doctor.doctor`)."""

from __future__ import annotations

import json
import sys

from ptebuild.cli.options import add_cache_options

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="what this machine can lower and check, per backend, and the toolchain",
        description=(
            "For each backend: can this machine lower its programs, can it run their check, and why "
            "not. Found once per toolchain by lowering and checking a 1-op program in a fresh "
            "interpreter (seconds), then read from the cache folder; a build asks the same before it "
            "lowers anything."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--no-probe", action="store_true", help="report only what is known without probing")
    parser.add_argument(
        "--verbose", "-v", action="store_true",
        help="also print the digests the verdicts are kept under (ptebuild's code, the probe's, torch's and "
        "executorch's version.py) and the verdict file",
    )
    add_cache_options(parser)
    parser.set_defaults(handler=doctor_command)


def _mark(value: object) -> str:
    return "?" if value is None else ("yes" if value else "no")


def doctor_command(args: argparse.Namespace) -> int:
    from ptebuild.api.doctor import doctor

    progress = None if args.json else (lambda text: print(text, file=sys.stderr, flush=True))
    report = doctor(args.cache, probe=not args.no_probe, progress=progress)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    rows = [("backend", "lower", "check", "why")]
    for row in report.backends:
        check = f"{_mark(row.check)} ({row.check_kind})"
        rows.append((row.backend, _mark(row.lower), check, row.why or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:3])) + "  " + r[3])
    print()
    for row in report.backends:
        if row.plugin:
            print(f"plug-in {row.backend}: {row.plugin}")
    for problem in report.problems:
        print(f"plug-in left out: {problem}")
    for key, value in sorted(report.facts.items()):
        if args.verbose or not _is_digest(value):
            print(f"{key}: {value}")
    if report.verdicts and args.verbose:
        print(f"verdicts: {report.verdicts}")
    return 0


def _is_digest(value: object) -> bool:
    """A fact that is a hex digest (what the verdicts are kept under): for --verbose only."""
    text = str(value)
    return len(text) >= 32 and all(c in "0123456789abcdef" for c in text)
