"""``ptebuild build``: build every program of a manifest."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ptebuild.errors import UsageError
from ptebuild.processes import env_flag


def register(subparsers) -> None:
    parser = subparsers.add_parser("build", help="build the programs of a manifest")
    add_build_arguments(parser)
    parser.set_defaults(handler=build_command)


def add_build_arguments(parser) -> None:
    """The options of ``build`` (``lock`` builds too, and takes the same)."""
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
        "--locked", action="store_true",
        help="fail (exit 1) if ptebuild.lock beside the manifest is missing or stale, or an output's bytes differ from it",
    )
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
        help="where programs are lowered: daemon (a warm worker server; the default), local (worker "
        "processes; the default when $CI is set), ray (a Ray cluster); also $PTEBUILD_EXECUTOR",
    )
    parser.add_argument(
        "--no-daemon", action="store_true",
        help="lower in worker processes of this build, not in the warm server (also $PTEBUILD_NO_DAEMON=1)",
    )
    parser.add_argument("--ray-address", metavar="ADDRESS", help="with --executor ray: the cluster (default: $RAY_ADDRESS, else a local one)")
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
        self.events: list[tuple[str, str, str]] = []
        """What was reported (a no-op stamp replays it)."""

    def __call__(self, name: str, event: str, text: str) -> None:
        self.events.append((name, event, text))
        if event == "warning":
            print(f"warning: {name + ': ' if name else ''}{text}", file=self.stream, flush=True)
            return
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:6.1f}s] {name}: {text}", file=self.stream, flush=True)


def _summary(results, out_dir: Path, elapsed: float) -> str:
    from ptebuild.store.sizes import format_size

    rows = [("target", "backend", "status", "seconds", "check", "outputs")]
    for r in results:
        if r.figures and all("max_abs_error" in f for f in r.figures):
            worst = max(f["max_abs_error"] for f in r.figures)
            cosine = min(f["cosine"] for f in r.figures)
            check = f"err {worst:.1e} cos {cosine:.6f}"
        else:  # a check without numbers (a Windows program's imports): its name
            check = getattr(r, "check", "") or "-"
        outputs = ", ".join(f"{o.name} ({format_size(o.size)})" for o in r.outputs) or "-"
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


class BuildRun:
    """What a ``build`` (or ``lock``) run did: for the command that prints it."""

    def __init__(self, plan, out_dir: Path, results: list, seconds: float, lock_problems: list[str], builder=None,
                 report: TerminalReport | None = None) -> None:
        self.plan = plan
        self.out_dir = out_dir
        self.results = results
        self.seconds = seconds
        self.lock_problems = lock_problems
        self.builder = builder
        self.report = report


def run_build(args, *, locked: bool = False) -> BuildRun:
    """Load the plan, build it (after checking the lock, with ``locked``) and return what happened."""
    from ptebuild.builder.build import Builder, BuildOptions
    from ptebuild.builder.plan_cache import load_plan
    from ptebuild.manifest.typos import did_you_mean

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
            executor=_executor(args, cache),
            executor_options=_executor_options(args, cache),
            shard=args.shard,
            rebuild_check=getattr(args, "check", False),
        )
        builder = Builder(plan, options, report)
        partial = bool(args.only or args.skip_backend or args.shard)
        if locked:
            problems = _lock_problems(args.manifest, _static_lock_entries(builder), partial)
            if problems:
                return BuildRun(plan, builder.folder.path, [], time.monotonic() - started, problems, builder, report)
        results = builder.run()
        problems = []
        if locked:
            from ptebuild.runtime.record import read_build_record

            record = read_build_record(builder.folder.path)
            targets = {name: entry for name, entry in (record.targets if record else {}).items() if name in known}
            problems = _lock_problems(args.manifest, _record_lock_entries(targets, results), partial)
    finally:
        if cache is not None:
            cache.close()
    return BuildRun(plan, builder.folder.path, results, time.monotonic() - started, problems, builder, report)


def _static_lock_entries(builder) -> dict:
    from ptebuild.release.lock import LockEntry

    return {
        name: LockEntry(name=name, kind=kind, key=key, backend=backend, inputs=inputs)
        for name, (kind, key, backend, inputs) in builder.static_inputs().items()
    }


def _record_lock_entries(targets: dict, results) -> dict:
    from ptebuild.release.lock import lock_entries_from_record

    built = {r.name for r in results}
    return {name: entry for name, entry in lock_entries_from_record(targets).items() if name in built}


def _lock_problems(manifest: str, entries: dict, partial: bool) -> list[str]:
    from ptebuild.release.lock import LOCK_NAME, check_locked

    lock_path = Path(manifest).parent / LOCK_NAME
    return [str(m) for m in check_locked(lock_path, entries, subset=partial)]


def build_command(args) -> int:
    stamp = _noop_stamp(args)
    if stamp is not None and _replay(args, stamp):
        return 0
    from ptebuild.results import FailureKind, Status

    run = run_build(args, locked=args.locked)
    results, out_dir = run.results, run.out_dir
    failed = [r for r in results if r.status in (Status.FAILED, Status.NEEDS_GPU)]
    document = {
        "manifest": args.manifest,
        "out": str(out_dir),
        "seconds": round(run.seconds, 3),
        "ok": not failed and not run.lock_problems,
        "programs": [r.to_json() for r in results],
    }
    if args.shard:
        document["shard"] = f"{args.shard[0]}/{args.shard[1]}"
    if args.locked:
        document["lock"] = run.lock_problems
    if args.json:
        print(json.dumps(document, indent=2))
    elif results:
        if args.explain:
            for r in results:
                for line in r.explain:
                    print(f"{r.name}: {line}")
        print(_summary(results, out_dir, run.seconds))
    for r in failed:
        print(f"error: {r.message}", file=sys.stderr)
    for problem in run.lock_problems:
        print(f"error: --locked: {problem}", file=sys.stderr)
    if any(r.status is Status.SKIPPED for r in results):
        print("note: programs were skipped after a failure; use --keep-going to build them anyway", file=sys.stderr)
    if any(r.failure is FailureKind.MANIFEST for r in failed):
        return 2
    code = 1 if failed or run.lock_problems else 0
    if stamp is not None and code == 0 and _was_noop(run):
        from ptebuild.builder import noop

        files, folders, entries = run.builder.looked_at()
        summary = "" if args.json else _summary(results, out_dir, 0.0)
        explain = [f"{r.name}: {line}" for r in results for line in r.explain] if args.explain else []
        replay = {"document": document, "summary": summary, "explain": explain, "events": run.report.events}
        noop.write(stamp, files, folders, entries, replay)
    return code


def _noop_stamp(args) -> Path | None:
    """Where this invocation's no-op stamp lives, or None when it may not have one."""
    if args.no_cache or args.locked or getattr(args, "check", False):
        return None
    from ptebuild.builder import noop
    from ptebuild.cache_dir import default_cache_dir

    root = Path(args.cache) if args.cache else default_cache_dir()
    fields = {k: v for k, v in sorted(vars(args).items()) if k != "handler"}
    return noop.stamp_path(Path(os.path.abspath(root)), [json.dumps(fields, default=str, sort_keys=True)])


def _was_noop(run: BuildRun) -> bool:
    """Every target up to date in place: nothing built, restored, failed or warned about, and
    nothing whose key depends on more than files (a GPU query)."""
    from ptebuild.backends import get_backend
    from ptebuild.results import Status

    return (
        bool(run.results)
        and all(r.status is Status.CACHED and r.explain == ["up to date"] for r in run.results)
        and all(r.backend is None or get_backend(r.backend).toolchain_from_files for r in run.results)
        and not any(event == "warning" for _, event, _ in run.report.events)
    )


def _replay(args, stamp: Path) -> bool:
    """Print what the stamped no-op printed, if nothing it looked at has moved."""
    from ptebuild.builder import noop

    started = time.monotonic()
    replay = noop.replay(stamp)
    if not isinstance(replay, dict):
        return False
    try:
        report = TerminalReport(sys.stderr, quiet=args.json)
        for name, event, text in replay["events"]:
            report(name, event, text)
        if args.json:
            print(json.dumps({**replay["document"], "seconds": round(time.monotonic() - started, 3)}, indent=2))
        else:
            for line in replay["explain"]:
                print(line)
            lines = replay["summary"].splitlines()
            tally, _, out = lines[-1].partition(" in 0.0s -> ")
            print("\n".join(lines[:-1] + [f"{tally} in {time.monotonic() - started:.1f}s -> {out}"]))
    except (KeyError, TypeError, ValueError):
        noop.forget(stamp)
        return False
    return True




def _executor(args, cache) -> str:
    """``--executor``, else ``$PTEBUILD_EXECUTOR``, else the warm server, except on CI, with
    ``--no-daemon`` or ``$PTEBUILD_NO_DAEMON``, without a local cache (its socket lives there), or
    off Linux."""
    from ptebuild.builder.executors import EXECUTOR_MODULES
    from ptebuild.manifest.typos import did_you_mean

    name = args.executor or os.environ.get("PTEBUILD_EXECUTOR")
    if name is None:
        no_daemon = args.no_daemon or env_flag("PTEBUILD_NO_DAEMON")
        on_ci = os.environ.get("CI", "").lower() not in ("", "0", "false")
        local_cache = cache is not None and cache.local_root is not None
        # The warm server forks a child per task after importing torch: tried on Linux only.
        linux = sys.platform.startswith("linux")
        name = "local" if no_daemon or on_ci or not local_cache or not linux else "daemon"
    if name not in EXECUTOR_MODULES:
        raise UsageError(f"--executor: no executor {name!r}{did_you_mean(name, list(EXECUTOR_MODULES))}")
    if name == "daemon" and (cache is None or cache.local_root is None):
        raise UsageError("--executor daemon: the warm server lives in the local cache folder; drop --no-cache")
    return name


def _executor_options(args, cache) -> dict:
    options = {}
    if cache is not None and cache.local_root is not None:
        options["cache_dir"] = cache.local_root
    if args.ray_address:
        options["address"] = args.ray_address
    return options
