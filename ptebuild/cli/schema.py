"""``ptebuild schema``: print the manifest's JSON Schema, for editors."""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("schema", help="print the manifest's JSON Schema")
    parser.set_defaults(handler=schema_command)


def schema_command(args: argparse.Namespace) -> int:
    import sys

    from ptebuild.backends import plugin_problems
    from ptebuild.manifest.schema import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    for problem in plugin_problems():
        print(f"warning: {problem}", file=sys.stderr)
    return 0
