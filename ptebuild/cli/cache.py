"""``ptebuild cache``: statistics, size-bounded garbage collection and verification of the cache.

The work is done by :class:`ptebuild.store.Store` (``stats``, ``gc``, ``verify``); this module
only parses, prints and picks the exit code. A cache folder that does not exist yet is an
empty cache: it is reported as such and never created by these commands.
"""

from __future__ import annotations

import argparse
import json

from ptebuild.cli.options import add_cache_options
from ptebuild.errors import UsageError

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    from ptebuild.cli.parser import Subparsers
    from ptebuild.store import Store

EXIT_OK, EXIT_FAILED = 0, 1


def register(subparsers: Subparsers) -> None:
    from ptebuild.cli.parser import Parser

    parser = subparsers.add_parser(
        "cache", help="show, shrink or check the build cache",
        description="Upkeep of the content-addressed build cache ($PTEBUILD_CACHE or ~/.cache/ptebuild).",
    )
    commands = parser.add_subparsers(dest="cache_command", metavar="SUBCOMMAND", parser_class=Parser)
    commands.required = True

    stats = commands.add_parser("stats", help="entries, blobs, size, hits and misses of the cache")
    add_cache_options(stats)
    stats.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    stats.set_defaults(handler=stats_command)

    gc = commands.add_parser("gc", help="evict least recently used entries until the cache fits in SIZE")
    gc.add_argument("--max-size", required=True, metavar="SIZE",
                    help="size limit, e.g. 500M, 2G (powers of 1000), 1.5GiB (powers of 1024), 0")
    add_cache_options(gc)
    gc.set_defaults(handler=gc_command)

    verify = commands.add_parser("verify", help="rehash every blob and record; drop corrupt ones (exit 1 if any)")
    add_cache_options(verify)
    verify.set_defaults(handler=verify_command)


def _store(args: argparse.Namespace) -> tuple[Store, bool]:
    """The Store named by ``--cache`` (else the default folder); None if the folder does not exist."""
    from ptebuild.cache_dir import cache_folder
    from ptebuild.store import Store

    root = cache_folder(args.cache)
    store = Store(root)
    return store, root.is_dir()


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def stats_command(args: argparse.Namespace) -> int:
    from ptebuild.store import format_size

    store, exists = _store(args)
    if exists:
        try:
            s = store.stats()
        finally:
            store.close()
    else:
        s = {"root": str(store.root), "entries": 0, "blobs": 0, "bytes": 0, "blob_bytes": 0, "hits": 0, "misses": 0}
    lookups = s["hits"] + s["misses"]
    hit_rate = s["hits"] / lookups if lookups else None
    remote = _last_build_remote(store.root)
    if args.json:
        document = {**s, "hit_rate": None if hit_rate is None else round(hit_rate, 4), "last_build_remote": remote}
        print(json.dumps(document, indent=2))
        return EXIT_OK
    rows = [
        ("cache", s["root"] + ("" if exists else " (does not exist yet)")),
        ("entries", str(s["entries"])),
        ("blobs", f"{s['blobs']} ({format_size(s['blob_bytes'])})"),
        ("size", f"{format_size(s['bytes'])} ({s['bytes']} bytes, blobs and records)"),
        ("hits", str(s["hits"])),
        ("misses", str(s["misses"])),
        ("hit rate", "-" if hit_rate is None else f"{hit_rate:.1%}"),
    ]
    for name, counters in remote.items():
        figures = ", ".join(
            f"{key.replace('_', ' ')} {format_size(value) if key.startswith('bytes') else value}"
            for key, value in sorted(counters.items())
            if key != "source"
        )
        rows.append(("last build", f"{name}: {figures}"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name.ljust(width)}  {value}")
    return EXIT_OK


def _last_build_remote(root: Path) -> dict[str, dict[str, Any]]:
    """The remote tiers' counters of the last build that used one (``<cache>/last-build.json``)."""
    try:
        document = json.loads((root / "last-build.json").read_text(encoding="utf-8"))
        tiers = document["tiers"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {name: c for name, c in tiers.items() if isinstance(c, dict) and c.get("source") == "remote"}


def gc_command(args: argparse.Namespace) -> int:
    from ptebuild.store import GcReport, format_size, maintenance, parse_size

    try:
        max_size = parse_size(args.max_size)
    except UsageError as exc:
        raise UsageError(f"--max-size: {exc}") from None
    store, exists = _store(args)
    if exists:
        try:
            report = store.gc(max_size)
        finally:
            store.close()
    else:
        report = GcReport()
    for item in report.corrupt:
        print(f"dropped damaged {item}")
    print(
        f"freed {format_size(report.bytes_freed)}: {_plural(report.records_removed, 'record')}, "
        f"{_plural(report.blobs_removed, 'blob')}, {_plural(report.temps_removed, 'temporary file')}; "
        f"{format_size(report.bytes_kept)} kept (limit {args.max_size.strip()}) in {store.root}"
    )
    if report.bytes_kept > max_size:
        hours = maintenance.GRACE_SECONDS / 3600
        print(
            f"note: still over the limit: unreferenced blobs younger than {hours:g} h are kept, "
            "as a running build may be about to record them"
        )
    return EXIT_OK


def verify_command(args: argparse.Namespace) -> int:
    import sys

    from ptebuild.store import CacheAudit, format_size

    store, exists = _store(args)
    if exists:
        try:
            report = store.verify()
        finally:
            store.close()
    else:
        report = CacheAudit()
    for item in report.corrupt:
        print(f"corrupt {item}")
    print(
        f"checked {_plural(report.blobs_checked, 'blob')} and {_plural(report.records_checked, 'record')} "
        f"in {store.root}: "
        + (
            "all sound"
            if report.ok
            else f"dropped {_plural(report.blobs_removed, 'blob')} and "
            f"{_plural(report.records_removed, 'record')} ({format_size(report.bytes_freed)})"
        )
    )
    if report.ok:
        return EXIT_OK
    print(
        f"error: {_plural(len(report.corrupt), 'corrupt cache entry', 'corrupt cache entries')} found and dropped; "
        "the builds that need them will run again",
        file=sys.stderr,
    )
    return EXIT_FAILED
