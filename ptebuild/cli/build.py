"""``ptebuild build``: build every program of a manifest."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ptebuild.errors import UsageError


def register(subparsers) -> None:
    parser = subparsers.add_parser("build", help="build the programs of a manifest")
    parser.add_argument("manifest", help="the TOML manifest")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: the manifest's defaults.out)")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="build only these programs or shim libraries")
    parser.add_argument("--keep-going", action="store_true", help="build the other programs when one fails")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: number of cores)")
    parser.add_argument("--explain", action="store_true", help="say why each program was rebuilt or restored")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="DIR", help="cache folder (default: $PTEBUILD_CACHE or ~/.cache/ptebuild)")
    cache.add_argument("--no-cache", action="store_true", help="build without reading or writing the cache")
    parser.set_defaults(handler=build_command)


def open_store(args):
    if getattr(args, "no_cache", False):
        return None
    from ptebuild.store import Store, default_cache_dir

    return Store(Path(args.cache) if args.cache else default_cache_dir())


class TerminalReport:
    """Progress lines on stderr: what is being built, each step, elapsed time."""

    def __init__(self, stream, quiet: bool):
        self.stream = stream
        self.quiet = quiet
        self.started = time.monotonic()

    def __call__(self, name: str, event: str, text: str) -> None:
        if event == "warning":
            print(f"warning: {name + ': ' if name else ''}{text}", file=self.stream, flush=True)
            return
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {name}: {text}", file=self.stream, flush=True)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _summary(results, out_dir: Path, elapsed: float) -> str:
    rows = [("target", "backend", "status", "seconds", "check", "outputs")]
    for r in results:
        if r.figures:
            worst = max(f["max_abs_error"] for f in r.figures)
            cosine = min(f["cosine"] for f in r.figures)
            check = f"err {worst:.1e} cos {cosine:.6f}"
        else:
            check = "-"
        outputs = ", ".join(f"{Path(o['path']).name} ({_size(o['bytes'])})" for o in r.outputs) or "-"
        rows.append((r.name, r.backend or "shims", r.status, f"{r.seconds:.1f}", check, outputs))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5] for row in rows]
    counts = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    lines.append(f"{tally} in {elapsed:.1f}s -> {out_dir}")
    return "\n".join(lines)


def build_command(args) -> int:
    from ptebuild.builder.build import BuildOptions, build
    from ptebuild.builder.plan_cache import load_plan
    from ptebuild.manifest.typos import did_you_mean

    started = time.monotonic()
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    store = open_store(args)
    plan = load_plan(args.manifest, store)
    if args.only:
        known = [p.name for p in plan.programs] + [s.name for s in plan.shims]
        for name in args.only:
            if name not in known:
                raise UsageError(f"--only: {args.manifest} has no program {name!r}{did_you_mean(name, known)}")
        plan = plan.select(args.only)
    options = BuildOptions(
        out_dir=Path(args.out) if args.out else None,
        store=store,
        jobs=args.jobs or os.cpu_count() or 1,
        keep_going=args.keep_going,
        explain=args.explain,
        debug=args.debug,
    )
    report = TerminalReport(sys.stderr, quiet=args.json)
    results = build(plan, options, report)
    out_dir = options.out_dir or plan.out_dir()
    elapsed = time.monotonic() - started
    failed = [r for r in results if r.status == "failed"]
    if args.json:
        document = {
            "manifest": args.manifest,
            "out": str(out_dir),
            "seconds": round(elapsed, 3),
            "ok": not failed,
            "programs": [r.to_json() for r in results],
        }
        print(json.dumps(document, indent=2))
    else:
        if args.explain:
            for r in results:
                for line in r.explain:
                    print(f"{r.name}: {line}")
        print(_summary(results, out_dir, elapsed))
    for r in failed:
        print(f"error: {r.message}", file=sys.stderr)
    if any(r.status == "skipped" for r in results):
        print("note: programs were skipped after a failure; use --keep-going to build them anyway", file=sys.stderr)
    if any(r.failure_kind == "manifest" for r in failed):
        return 2
    return 1 if failed else 0
