"""``ptebuild lock``: build (or restore) a manifest's targets and write ``ptebuild.lock`` beside it
(:func:`ptebuild.api.lock.lock`)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    from ptebuild.cli.build import add_build_arguments

    parser = subparsers.add_parser(
        "lock",
        help="build or restore every target, then write ptebuild.lock beside the manifest",
        description=(
            "Build the manifest (restoring from the cache what it can), then write ptebuild.lock: per "
            "target its action key, the inputs it was keyed by, the dependencies its lowering used and "
            "each output's SHA-256 and size. Commit it; `ptebuild build --locked` fails when it is stale."
        ),
    )
    add_build_arguments(parser, lock=True)
    parser.set_defaults(handler=lock_command)


def lock_command(args: argparse.Namespace) -> int:
    from ptebuild.api.lock import lock
    from ptebuild.cli.build import request_from
    from ptebuild.cli.progress import TerminalReport

    progress = TerminalReport(sys.stderr, quiet=args.json)
    try:
        result = lock(args.manifest, request_from(args), progress)
    finally:
        progress.close()
    for target in result.not_built:
        print(f"error: {target.message or target.name + ': ' + str(target.status)}", file=sys.stderr)
    if result.path is None:
        print("error: lock: not written, since not every target was built", file=sys.stderr)
        return 1
    print(f"wrote {result.path} ({result.targets} targets)")
    return 0
