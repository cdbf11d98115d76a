"""``ptebuild run``: run a built program on its example inputs, against eager PyTorch."""

from __future__ import annotations

import json
import sys

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

    from ptebuild.cli import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a built program on its example inputs: error vs eager PyTorch and latency",
        description=(
            "Load PROGRAM's .pte and .ptd (checked to belong together), run each method on the "
            "example inputs of the build, compare the outputs with eager PyTorch (max abs error, "
            "cosine) and print the median latency of both. Exit 1 if the figures are outside the "
            "program's check tolerances."
        ),
    )
    parser.add_argument("manifest", help="the TOML manifest")
    parser.add_argument("program", help="the program to run")
    parser.add_argument("--method", metavar="M", help="run only this method (default: all)")
    parser.add_argument("--iters", type=int, default=20, metavar="N", help="timed runs per method (default: 20)")
    parser.add_argument("--out", metavar="DIR", help="folder of the built files (default: the manifest's defaults.out)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.set_defaults(handler=run_command)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def run_command(args: argparse.Namespace) -> int:
    from ptebuild.api.run import run

    result = run(args.manifest, args.program, method=args.method, iters=args.iters, out=args.out)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        data = f" + {result.ptd.name}" if result.ptd else ""
        print(f"{result.program} ({result.backend}): {result.pte}{data}")
        rows = [("method", "max abs err", "cosine", "executorch", "eager", "ratio")]
        for m in result.methods:
            ratio = f"{m.eager_latency / m.latency:.2f}x" if m.latency > 0 else "-"
            flag = "" if m.within_tolerance else " !"
            rows.append(
                (m.method, f"{m.max_abs_error:.1e}{flag}", f"{m.cosine:.6f}", _ms(m.latency), _ms(m.eager_latency), ratio)
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        print(f"median of {result.iters} runs after 1 warm-up; ratio = eager / executorch")
    if not result.within_tolerance:
        worst = [m.method for m in result.methods if not m.within_tolerance]
        print(
            f"error: {result.program}: {', '.join(worst)} outside the check tolerances "
            f"(atol {result.atol:g}, min cosine {result.min_cosine:g})",
            file=sys.stderr,
        )
        return 1
    return 0
