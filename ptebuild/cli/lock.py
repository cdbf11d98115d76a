"""``ptebuild lock``: build (or restore) a manifest's targets and write ``ptebuild.lock`` beside it."""

from __future__ import annotations

import sys
from pathlib import Path


def register(subparsers) -> None:
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
    add_build_arguments(parser)
    parser.set_defaults(handler=lock_command)


def lock_command(args) -> int:
    from ptebuild.cli.build import _record_lock_entries, run_build
    from ptebuild.errors import UsageError
    from ptebuild.release.lock import LOCK_NAME, write_lock
    from ptebuild.results import Status
    from ptebuild.runtime.record import read_build_record

    if args.only or args.skip_backend or args.shard:
        raise UsageError("lock: a lock covers the whole manifest; drop --only, --skip-backend and --shard")
    args.check = getattr(args, "check", False)
    run = run_build(args)
    failed = [r for r in run.results if r.status in (Status.FAILED, Status.NEEDS_GPU, Status.SKIPPED)]
    for r in failed:
        print(f"error: {r.message or r.name + ': ' + str(r.status)}", file=sys.stderr)
    if failed:
        print("error: lock: not written, since not every target was built", file=sys.stderr)
        return 1
    record = read_build_record(run.out_dir)
    names = {r.name for r in run.results}
    targets = {name: entry for name, entry in (record.targets if record else {}).items() if name in names}
    path = Path(args.manifest).parent / LOCK_NAME
    write_lock(path, _record_lock_entries(targets, run.results), manifest=Path(args.manifest).name)
    print(f"wrote {path} ({len(targets)} targets)")
    return 0
