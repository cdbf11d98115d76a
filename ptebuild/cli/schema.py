"""``ptebuild schema``: print the manifest's JSON Schema, for editors."""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser("schema", help="print the manifest's JSON Schema")
    parser.set_defaults(handler=schema_command)


def schema_command(args) -> int:
    from ptebuild.manifest.schema import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0
