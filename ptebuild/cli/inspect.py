"""``ptebuild inspect``: what a ``.pte`` or ``.ptd`` holds (see :mod:`ptebuild.runtime.inspect`).

Imports neither torch nor executorch.
"""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarise a .pte (methods, dynamic dims, delegation, sizes, weights) or a .ptd; --full: every part",
        description=(
            "Describe FILE without executing it. By default a summary: for a .pte each method's "
            "inputs and outputs (named, with dynamic dims as ranges such as batch 1..8, where the "
            "build record beside the file declares them), how much of it the delegates took, its "
            "size split, planned memory and its weights; for a .ptd its keys and size. --full: every part, for a "
            ".pte its header, each method's values, operators and delegates, its segments, named data, "
            "the keys it needs from a .ptd and the operators a selective runtime build must register, "
            "then its figures (calls, size split, planned memory, inputs' and outputs' bytes, and the "
            "delegation by operator a build record beside it counted); "
            "for a .ptd every key with its size. Exit 2 if FILE is neither or is corrupt."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="a .pte or .ptd file")
    parser.add_argument("--full", action="store_true", help="list every part (segments, keys, operators), not a summary")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout (all of it)")
    parser.add_argument(
        "--oplist", action="store_true",
        help="print the .pte's operator list for a selective runtime build, as ExecuTorch's gen_oplist writes it "
        "(selected_operators.yaml)",
    )
    parser.set_defaults(handler=inspect_command)


def inspect_command(args: argparse.Namespace) -> int:
    from ptebuild.api.inspect import inspect
    from ptebuild.runtime.declared import declared_program
    from ptebuild.runtime.inspection_text import describe, summary

    if args.oplist:
        from ptebuild.api.inspect import operator_list

        sys.stdout.write(operator_list(args.file).decode("utf-8"))
        return 0
    result = inspect(args.file)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    elif args.full:
        print("\n".join(describe(result)))
    else:
        print("\n".join(summary(result, declared_program(args.file))))
    return 0
