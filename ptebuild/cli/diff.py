"""``ptebuild diff``: which part of two ``.pte`` or ``.ptd`` files differs (see :mod:`ptebuild.runtime.diff`).

Imports neither torch nor executorch.
"""

from __future__ import annotations

import json


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "diff",
        help="say which part of two .pte or .ptd files differs (header, method plan, delegate payload, segment, data key)",
        description=(
            "Compare A and B part by part and print one line per part that differs. Exit 0 if the "
            "files are identical, 1 if they differ, 2 if either is not a readable .pte/.ptd."
        ),
    )
    parser.add_argument("a", metavar="A", help="a .pte or .ptd file")
    parser.add_argument("b", metavar="B", help="the file to compare it with")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=diff_command)


def diff_command(args) -> int:
    from ptebuild.api.inspect import diff

    report = diff(args.a, args.b)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    elif report.same:
        print(f"{report.a} and {report.b} are identical")
    else:
        for difference in report.differences:
            print(difference)
        print(f"{len(report.differences)} differences between {report.a} and {report.b}")
    return 0 if report.same else 1
