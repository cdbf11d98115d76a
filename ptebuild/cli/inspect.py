"""``ptebuild inspect``: what a ``.pte`` or ``.ptd`` holds (see :mod:`ptebuild.runtime.inspect`).

Imports neither torch nor executorch.
"""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="show a .pte's methods, delegates, segments and needed keys, or a .ptd's keys",
        description=(
            "Describe FILE without executing it: for a .pte its header, each method's inputs and "
            "outputs (dtype and sizes), operators and delegates, its segments, named data, the "
            "keys it needs from a .ptd and the operators a selective runtime build must register, "
            "then its figures: each method's delegate and operator calls, its size split (plan, "
            "constants, named data, each delegate's payload, the .ptd files), each method's planned "
            "memory and inputs' and outputs' bytes, and, from a build record beside it, the "
            "delegation by operator its build counted; for a .ptd its keys with their sizes. Exit 2 "
            "if FILE is neither or is corrupt."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="a .pte or .ptd file")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument(
        "--oplist", action="store_true",
        help="print the .pte's operator list for a selective runtime build, as ExecuTorch's gen_oplist writes it "
        "(selected_operators.yaml)",
    )
    parser.set_defaults(handler=inspect_command)


def inspect_command(args: argparse.Namespace) -> int:
    from ptebuild.api.inspect import inspect
    from ptebuild.runtime.inspect import describe

    if args.oplist:
        from ptebuild.api.inspect import operator_list

        sys.stdout.write(operator_list(args.file).decode("utf-8"))
        return 0
    result = inspect(args.file)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(describe(result)))
    return 0
