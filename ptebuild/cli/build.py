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
    parser.add_argument(
        "--skip-backend", action="append", default=[], metavar="NAME",
        help="leave out the programs of this backend (e.g. cuda on a machine without a GPU); repeatable",
    )
    parser.add_argument("--keep-going", action="store_true", help="build the other programs when one fails")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--jobs", "-j", type=int, metavar="N", help="worker processes (default: number of cores)")
    parser.add_argument("--explain", action="store_true", help="say why each program was rebuilt or restored")
    parser.add_argument(
        "--check", action="store_true",
        help="lower every program again, ignoring the cache, in a changed environment, and fail if the bytes differ",
    )
    parser.add_argument(
        "--shard", type=_shard, metavar="I/N",
        help="build only shard I of N (a stable split by action key, for CI matrices)",
    )
    parser.add_argument(
        "--executor", default=None, metavar="NAME",
        help="where programs are lowered: local (worker processes; the default)",
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="DIR", help="cache folder (default: $PTEBUILD_CACHE or ~/.cache/ptebuild)")
    cache.add_argument("--no-cache", action="store_true", help="build without reading or writing the cache")
    remote = parser.add_argument_group("remote cache (Bazel's HTTP cache protocol)")
    remote.add_argument("--remote-cache", metavar="URL", help="remote cache server (default: $PTEBUILD_REMOTE_CACHE)")
    remote.add_argument(
        "--remote-cache-header", action="append", default=[], metavar="NAME=VALUE",
        help="an HTTP header for every request (e.g. a token); also $PTEBUILD_REMOTE_CACHE_HEADER",
    )
    remote.add_argument(
        "--remote-upload", choices=("yes", "no"), default=None,
        help="upload what this build lowers (default: yes; $PTEBUILD_REMOTE_UPLOAD)",
    )
    remote.add_argument(
        "--remote-secret-env", metavar="VAR",
        help="name of an environment variable holding the secret that signs action entries (HMAC-SHA-256)",
    )
    parser.set_defaults(handler=build_command)


def _shard(text: str) -> tuple[int, int]:
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise UsageError(f"--shard {text!r}: expected I/N with 1 <= I <= N, e.g. 1/2")
    return int(index), int(count)


def open_cache(args, warn):
    """The cache front end for this build: the local folder, then the remote server if any."""
    from ptebuild.store.frontend import Cache
    from ptebuild.store.tiers import open_tier

    tiers = []
    root = None
    if not getattr(args, "no_cache", False):
        from ptebuild.store import Store, default_cache_dir

        store = Store(Path(args.cache) if args.cache else default_cache_dir())
        root = store.root
        tiers.append(open_tier("local", store))
    url = getattr(args, "remote_cache", None) or os.environ.get("PTEBUILD_REMOTE_CACHE")
    if url:
        upload = (getattr(args, "remote_upload", None) or os.environ.get("PTEBUILD_REMOTE_UPLOAD", "yes")) != "no"
        secret = None
        if getattr(args, "remote_secret_env", None):
            value = os.environ.get(args.remote_secret_env)
            if not value:
                raise UsageError(f"--remote-secret-env: ${args.remote_secret_env} is not set")
            secret = value.encode()
        from ptebuild.store.remote import headers_from

        headers = headers_from(getattr(args, "remote_cache_header", ()))
        tiers.append(open_tier("http", url, headers=headers, upload=upload, secret=secret, warn=warn))
    if not tiers:
        return None
    return Cache(tiers, warn, local_root=root)


def open_store(args):
    """The local store alone (for ``ptebuild run`` and ``lock``), or None with --no-cache."""
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
        if r.figures and all("max_abs_error" in f for f in r.figures):
            worst = max(f["max_abs_error"] for f in r.figures)
            cosine = min(f["cosine"] for f in r.figures)
            check = f"err {worst:.1e} cos {cosine:.6f}"
        else:
            check = "-"
        outputs = ", ".join(f"{o.name} ({_size(o.size)})" for o in r.outputs) or "-"
        status = str(r.status) + (" (remote)" if r.source is not None and r.source.value == "remote" else "")
        rows.append((r.name, r.backend or "shims", status, f"{r.seconds:.1f}", check, outputs))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5] for row in rows]
    counts = {}
    for r in results:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    lines.append(f"{tally} in {elapsed:.1f}s -> {out_dir}")
    return "\n".join(lines)


def build_command(args) -> int:
    from ptebuild.builder.build import BuildOptions, build
    from ptebuild.builder.plan_cache import load_plan
    from ptebuild.manifest.typos import did_you_mean
    from ptebuild.results import FailureKind, Status

    started = time.monotonic()
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    report = TerminalReport(sys.stderr, quiet=args.json)
    cache = open_cache(args, lambda text: report("", "warning", text))
    try:
        plan = load_plan(args.manifest, cache)
        known = [p.name for p in plan.programs] + [s.name for s in plan.shims]
        if args.only:
            for name in args.only:
                if name not in known:
                    raise UsageError(f"--only: {args.manifest} has no program {name!r}{did_you_mean(name, known)}")
            plan = plan.select(args.only)
        if args.skip_backend:
            from ptebuild.backends import BACKEND_MODULES

            for name in args.skip_backend:
                if name not in BACKEND_MODULES:
                    raise UsageError(f"--skip-backend: no backend {name!r}{did_you_mean(name, list(BACKEND_MODULES))}")
            plan = plan.select(
                [p.name for p in plan.programs if p.backend not in args.skip_backend] + [s.name for s in plan.shims]
            )
        options = BuildOptions(
            out_dir=Path(args.out) if args.out else None,
            cache=cache,
            jobs=args.jobs or os.cpu_count() or 1,
            keep_going=args.keep_going,
            explain=args.explain,
            debug=args.debug,
            executor=_executor(args),
            shard=args.shard,
            rebuild_check=args.check,
        )
        results = build(plan, options, report)
    finally:
        if cache is not None:
            cache.close()
    out_dir = options.out_dir or plan.out_dir()
    elapsed = time.monotonic() - started
    failed = [r for r in results if r.status in (Status.FAILED, Status.NEEDS_GPU)]
    if args.json:
        document = {
            "manifest": args.manifest,
            "out": str(out_dir),
            "seconds": round(elapsed, 3),
            "ok": not failed,
            "programs": [r.to_json() for r in results],
        }
        if args.shard:
            document["shard"] = f"{args.shard[0]}/{args.shard[1]}"
        print(json.dumps(document, indent=2))
    else:
        if args.explain:
            for r in results:
                for line in r.explain:
                    print(f"{r.name}: {line}")
        print(_summary(results, out_dir, elapsed))
    for r in failed:
        print(f"error: {r.message}", file=sys.stderr)
    if any(r.status is Status.SKIPPED for r in results):
        print("note: programs were skipped after a failure; use --keep-going to build them anyway", file=sys.stderr)
    if any(r.failure is FailureKind.MANIFEST for r in failed):
        return 2
    return 1 if failed else 0


def _executor(args) -> str:
    from ptebuild.builder.executors import EXECUTOR_MODULES
    from ptebuild.manifest.typos import did_you_mean

    name = args.executor or os.environ.get("PTEBUILD_EXECUTOR") or "local"
    if name not in EXECUTOR_MODULES:
        raise UsageError(f"--executor: no executor {name!r}{did_you_mean(name, list(EXECUTOR_MODULES))}")
    return name
