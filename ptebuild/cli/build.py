"""``ptebuild build``: build every program of a manifest (:func:`ptebuild.api.build.build`).

This module turns arguments into a :class:`~ptebuild.api.request.BuildRequest` and the report
into text; the work is the library's. A stamped no-op (:mod:`ptebuild.api.noop`) is answered
before the build machinery is imported.
"""

from __future__ import annotations

import json
import sys
import time

from ptebuild.api.request import BuildRequest, RemoteCache, parse_shard
from ptebuild.cli.options import add_cache_options
from ptebuild.cli.progress import TerminalReport

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from ptebuild.cli.parser import Subparsers


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser("build", help="build the programs of a manifest")
    add_build_arguments(parser)
    parser.set_defaults(handler=build_command)


def add_build_arguments(parser: argparse.ArgumentParser, lock: bool = False) -> None:
    """The options of ``build`` (``lock`` builds too, and takes the same but ``--locked`` and
    ``--reproduce``: a lock is written from a plain build)."""
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
        "--timings", action="store_true",
        help="write the build's timeline into the output's .ptebuild/ folder: timings.html (one self-contained page: "
        "each program's stages per worker, its delegation, size and memory, the check, cache hits) and "
        "timings.trace.json (a Chrome trace, for Perfetto)",
    )
    if not lock:
        parser.add_argument(
            "--locked", action="store_true",
            help="fail (exit 1) if ptebuild.lock beside the manifest is missing or stale, or an output's bytes differ from it",
        )
        parser.add_argument(
            "--reproduce", action="store_true",
            help="the reproducibility rebuild: lower every program again, ignoring the cache, in a changed environment "
            "(folder, hash seed, threads), and fail if the bytes differ",
        )
        from argparse import SUPPRESS

        parser.add_argument("--check", action="store_true", dest="check_renamed", help=SUPPRESS)  # renamed: --reproduce
    parser.add_argument(
        "--shard", type=parse_shard, metavar="I/N",
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
    add_cache_options(parser, no_cache=True)
    remote = parser.add_argument_group("remote cache (Bazel's HTTP cache protocol, or REAPI over gRPC)")
    remote.add_argument("--remote-cache", metavar="URL",
                        help="remote cache server: http[s]://host[:port][/prefix] or grpc[s]://host:port[/instance] "
                             "(default: $PTEBUILD_REMOTE_CACHE)")
    remote.add_argument(
        "--remote-cache-header", action="append", default=[], metavar="NAME=VALUE",
        help="an HTTP header (gRPC: metadata) for every request (e.g. a token); also $PTEBUILD_REMOTE_CACHE_HEADER",
    )
    remote.add_argument(
        "--remote-upload", choices=("yes", "no"), default=None,
        help="upload what this build lowers (default: yes; $PTEBUILD_REMOTE_UPLOAD)",
    )
    remote.add_argument(
        "--remote-secret-env", metavar="VAR",
        help="name of an environment variable holding the secret that signs action entries (HMAC-SHA-256)",
    )


def error_lines(failed: list[tuple[str, str]]) -> list[str]:
    """One line per cause: programs that failed with the same message (a model's weights that
    several programs load, a toolchain that fails every lowering) share one line that names them,
    each program's log folded into one mention of the folder; each other message as it is."""
    import re
    from pathlib import Path

    full_output = re.compile(r" \(full output: (.+)\)$")
    groups: dict[str, list[tuple[str, str | None]]] = {}
    said_first: dict[str, str] = {}
    for name, message in failed:
        found = full_output.search(message)
        cause = message[: found.start()] if found else message
        # The same cause located at each program (programs.NAME: ...) is one cause, said at the first.
        key = cause.replace(f": programs.{name}: ", ": programs.<program>: ", 1)
        said_first.setdefault(key, cause)
        groups.setdefault(key, []).append((name, found[1] if found else None))
    lines = []
    for key, programs in groups.items():
        cause = said_first[key]
        logs = [log for _, log in programs if log]
        if len(programs) == 1:
            lines.append(cause + (f" (full output: {logs[0]})" if logs else ""))
            continue
        names = [name for name, _ in programs]
        said = f"programs {', '.join(names[:-1])} and {names[-1]}"
        folder = f"; full output: {Path(logs[0]).parent}/<program>.log" if logs else ""
        lines.append(f"{cause} ({said}{folder})")
    return lines


def renames_line(manifest: str, failed: list[tuple[str, tuple[tuple[str, str, str], ...]]]) -> str:
    """One line for every program refused because its manifest was written for a release that passed
    inputs by position: each input to rename, once, and the programs it stopped."""
    renames: dict[str, tuple[str, str]] = {}
    for _, found in failed:
        for key, old, new in found:
            renames.setdefault(key, (old, new))
    names = [name for name, _ in failed]
    programs = f"program {names[0]}" if len(names) == 1 else f"programs {', '.join(names[:-1])} and {names[-1]}"
    fixes = "; ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in renames.items())
    return (f"{manifest}: inputs are bound to the model's parameters by name (releases before passed them by "
            f"position), and this manifest names them otherwise; rename them all: {fixes} ({programs})")


RENAMED_CHECK = ("warning: --check is now --reproduce (the reproducibility rebuild; 'check' is the numeric check "
                 "against eager PyTorch): --check goes in the next release")


def _renamed_check(args: argparse.Namespace) -> bool:
    """The old name of ``--reproduce``, taken for one release with a line on stderr."""
    if not getattr(args, "check_renamed", False):
        return False
    print(RENAMED_CHECK, file=sys.stderr)
    return True


def request_from(args: argparse.Namespace) -> BuildRequest:
    """The build request the arguments describe (the library fills in the rest from the environment)."""
    remote = None
    if args.remote_cache or args.remote_cache_header or args.remote_upload or args.remote_secret_env:
        remote = RemoteCache(url=args.remote_cache or "", headers=args.remote_cache_header,
                             upload=None if args.remote_upload is None else args.remote_upload != "no",
                             secret_env=args.remote_secret_env)
    return BuildRequest(
        out=args.out, only=args.only or (), skip_backends=args.skip_backend, keep_going=args.keep_going,
        jobs=args.jobs, explain=args.explain, locked=getattr(args, "locked", False),
        reproduce=getattr(args, "reproduce", False) or _renamed_check(args),
        shard=args.shard, executor=args.executor, no_daemon=args.no_daemon, ray_address=args.ray_address,
        cache=args.cache, no_cache=args.no_cache, remote=remote, debug=args.debug, timings=getattr(args, "timings", False),
    )


def _size(n: int) -> str:
    from ptebuild.sizes import format_size

    return format_size(n)


def _figures(p: dict[str, Any]) -> tuple[str, str]:
    """The ``delegated`` and ``planned`` cells of a program (``-`` where unknown)."""
    delegation = p.get("delegation") if isinstance(p.get("delegation"), dict) else None
    fraction = delegation.get("fraction") if delegation else None
    delegated = f"{100 * fraction:.1f}%" if isinstance(fraction, (int, float)) else "-"
    memory = p.get("memory") if isinstance(p.get("memory"), dict) else None
    planned = "-"
    if memory and p.get("size"):
        planned = _size(sum(int(m.get("planned_bytes") or 0) for m in memory.values() if isinstance(m, dict)))
    return delegated, planned


def summary(document: dict[str, Any]) -> str:
    """The table a build prints, from its report's JSON (the same for a replayed no-op).

    With ``--reproduce`` (targets with a ``rebuild`` verdict) a ``reproducible`` column says whether
    lowering again gave the same bytes; a target built only because it shares a weights file
    with one that ``--only`` named gets a line below the table saying so.
    """
    targets = document["targets"]
    rechecked = any(t.get("rebuild") for t in targets)
    header = ["target", "backend", "status", "seconds", "check", "delegated", "planned",
              *(["reproducible"] if rechecked else []), "outputs"]
    rows = [header]
    for p in targets:
        checked = p.get("checked")
        if checked:
            generation = checked.get("generation") or []  # a language model's generation check, per method
            if generation:
                steps = sum(g["steps"] for g in generation)
                if len(generation) > 1:  # a program of several methods, each checked: its figures per method
                    methods = ", ".join(g["method"] for g in generation)
                    check = check_words(checked, data=f"prompt {generation[0]['prompt_tokens']} + {generation[0]['steps']} steps; methods {methods}")
                    check += " tokens " + ", ".join(f"{g['method']} {g['tokens_agreed']}/{g['steps']}" for g in generation)
                else:
                    check = check_words(checked, data=f"prompt {generation[0]['prompt_tokens']} + {steps} steps")
                    check += f" tokens {generation[0]['tokens_agreed']}/{steps}"
            else:
                check = check_words(checked)
        else:  # a check without numbers (a Windows program's imports): its name
            check = p.get("check") or "-"
        outputs = ", ".join(f"{o['path'].replace(chr(92), '/').rsplit('/', 1)[-1]} ({_size(o['bytes'])})"
                            for o in p["outputs"]) or "-"
        status = p["status"] + (" (remote)" if p.get("source") == "remote" else "")
        reproducible = [_REPRODUCIBLE.get(p.get("rebuild", ""), "-")] if rechecked else []
        delegated, planned = _figures(p) if p["backend"] else ("-", "-")
        rows.append([p["name"], p["backend"] or "shims", status, f"{p['seconds']:.1f}", check, delegated, planned,
                     *reproducible, outputs])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1] for row in rows]
    lines += [f"{p['name']}: brought along: {p['brought_along']}" for p in targets if p.get("brought_along")]
    counts: dict[str, int] = {}
    for p in targets:
        counts[p["status"]] = counts.get(p["status"], 0) + 1
    tally = ", ".join(f"{n} {status}" for status, n in counts.items())
    if rechecked:
        same = sum(1 for p in targets if p.get("rebuild") == "same")
        tally += f"; {same} of {sum(1 for p in targets if p.get('rebuild'))} reproducible"
    lines.append(f"{tally} in {document['seconds']:.1f}s -> {document['out_dir']}")
    return "\n".join(lines)


_REPRODUCIBLE = {"same": "yes", "differs": "NO"}
"""``--reproduce``'s verdict (a target's ``rebuild``) as the table's ``reproducible`` column says it."""


def check_words(checked: dict[str, Any], data: str = "") -> str:
    """The table's check column from a report's ``checked`` (:class:`ptebuild.figures.CheckSummary`):
    ``err 3.0e-06 cos 1.000000 (float32 atol 0.001 rtol 0.0001; 3 sizes + 8 samples)``, led by
    ``PROVES NOTHING:`` when the check cannot fail; ``data`` says what it ran on where sizes do not
    (a language model's ``prompt 16 + 16 steps``). Plain JSON: a replayed no-op imports nothing."""
    tolerances = "; ".join(f"{dtype} atol {t['atol']:g} rtol {t['rtol']:g}" for dtype, t in checked["tolerances"].items())
    sizes = len(checked["data"]["random"])
    samples = checked["data"]["samples"]
    data = data or f"{sizes} size{'s' if sizes != 1 else ''}" + (f" + {samples} samples" if samples else "")
    top1 = f" top1 {checked['top1']:.0%}" if checked.get("top1") is not None else ""
    words = f"err {checked['max_abs_error']:.1e} cos {checked['cosine']:.6f}{top1} ({tolerances}; {data})"
    return f"PROVES NOTHING: {words}" if checked["verdict"] == "proves-nothing" else words


def check_notes(document: dict[str, Any]) -> list[str]:
    """A note for each program whose check proves nothing: why, and the way out."""
    notes = []
    for p in document.get("targets", ()):
        checked = p.get("checked") or {}
        if checked.get("verdict") == "proves-nothing":
            notes.append(f"note: {p['name']}: its check proves nothing: {'; '.join(checked.get('reasons', ()))}; "
                         f"{checked.get('way_out', '')}")
    return notes


def render(args: argparse.Namespace, document: dict[str, Any]) -> None:
    """Print a build's report: JSON, or the --explain lines and the table."""
    if args.json:
        print(json.dumps(document, indent=2))
    elif document["targets"]:
        if args.explain:
            for p in document["targets"]:
                for line in p.get("explain", ()):
                    print(f"{p['name']}: {line}")
        print(summary(document))


def build_command(args: argparse.Namespace) -> int:
    from ptebuild.api import noop

    request = request_from(args)
    progress = TerminalReport(sys.stderr, quiet=args.json)
    stamp = noop.stamp_for(args.manifest, request)
    if stamp is not None:
        started = time.monotonic()
        kept = noop.replay(stamp)
        if kept is not None:  # answered without importing the build machinery
            document, events = kept
            for event in events:
                progress(*event)
            progress.close()
            render(args, {**document, "seconds": round(time.monotonic() - started, 3)})
            for note in check_notes(document):
                print(note, file=sys.stderr)
            return 0
    from ptebuild.api.build import build_stamped

    try:
        report = build_stamped(args.manifest, request, stamp, progress)  # the stamp decided once, above
    finally:
        progress.close()
    document = report.to_json()
    render(args, document)
    for note in check_notes(document):
        print(note, file=sys.stderr)
    migrated = [t for t in report.failed if t.renames]
    for line in error_lines([(t.name, t.message) for t in report.failed if not t.renames]):
        print(f"error: {line}", file=sys.stderr)
    if migrated:
        print(f"error: {renames_line(str(report.manifest), [(t.name, t.renames) for t in migrated])}", file=sys.stderr)
    for problem in report.lock_problems:
        print(f"error: --locked: {problem}", file=sys.stderr)
    if report.skipped:
        print("note: programs were skipped after a failure; use --keep-going to build them anyway", file=sys.stderr)
    if report.timings is not None:
        print(f"timings: {report.timings[0]} (trace: {report.timings[1]})", file=sys.stderr)
    if report.manifest_error:
        return 2
    return 0 if report.ok else 1
