"""``ptebuild workers``: show or stop the warm worker servers of a cache folder.

A server is found by its socket, ``<cache>/workers/<toolchain-id>.sock``
(:mod:`ptebuild.daemon.protocol`); the one of this ptebuild's toolchain is marked ``current``,
the others (another venv, an older ptebuild) idle out by themselves or are stopped here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ptebuild.cli.options import add_cache_options
from ptebuild.sizes import format_size

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    from typing import Any

    from ptebuild.cli.parser import Subparsers

EXIT_OK = 0


def register(subparsers: Subparsers) -> None:
    from ptebuild.cli.parser import Parser

    parser = subparsers.add_parser(
        "workers", help="show or stop the warm worker servers",
        description="The warm worker servers keep torch and executorch imported between builds.",
    )
    commands = parser.add_subparsers(dest="workers_command", metavar="SUBCOMMAND", parser_class=Parser)
    commands.required = True
    status = commands.add_parser("status", help="list the servers of the cache folder and what they run")
    status.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    stop = commands.add_parser("stop", help="stop every server of the cache folder (running tasks fail)")
    for sub in (status, stop):
        add_cache_options(sub)
    status.set_defaults(handler=status_command)
    stop.set_defaults(handler=stop_command)


def _servers(args: argparse.Namespace) -> tuple[Path, list[tuple[Path, dict[str, Any] | None]]]:
    from ptebuild.cache_dir import cache_folder
    from ptebuild.daemon.admin import servers

    return servers(cache_folder(args.cache))


def status_command(args: argparse.Namespace) -> int:
    from ptebuild.daemon import protocol

    folder, servers = _servers(args)
    current = protocol.toolchain_id()
    if args.json:
        document = {
            "folder": str(folder),
            "toolchain": current,
            "servers": [
                {"socket": str(path), "toolchain": path.stem, "current": path.stem == current,
                 "alive": status is not None, **({k: v for k, v in status.items() if k != "op"} if status else {})}
                for path, status in servers
            ],
        }
        print(json.dumps(document, indent=2))
        return EXIT_OK
    if not servers:
        print(f"no warm worker server in {folder}")
        return EXIT_OK
    for path, status in servers:
        mark = " (current toolchain)" if path.stem == current else " (another toolchain)"
        if status is None:
            print(f"{path.stem}{mark}: not answering (a stale socket; the next build replaces it)")
            continue
        print(
            f"{path.stem}{mark}: pid {status['pid']}, up {status['uptime']:.0f}s, "
            f"{status['clients']} client(s), {len(status['running'])} running, {status['queued']} queued, "
            f"{status['tasks_run']} task(s) run, {format_size(status['rss'])} resident, "
            f"exits after {status['idle_timeout']:.0f}s idle"
        )
        for task in status["running"]:
            print(f"  {task['task_id']}: pid {task['pid']}, {format_size(task['rss'])} resident, for client pid {task['client']}")
    return EXIT_OK


def stop_command(args: argparse.Namespace) -> int:
    from ptebuild.daemon import admin

    folder, servers = _servers(args)
    stopped = 0
    for path, status in servers:
        if status is None:
            continue
        if not admin.stop(path):
            continue
        stopped += 1
        print(f"stopped {path.stem} (pid {status['pid']})")
    if not stopped:
        print(f"no warm worker server running in {folder}")
    return EXIT_OK
