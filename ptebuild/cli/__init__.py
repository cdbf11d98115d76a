"""The command line: the only place in ptebuild that prints or picks an exit code.

Each subcommand lives in its own module with a ``register(subparsers)`` function that adds
its parser and sets ``handler`` to a function ``(args) -> int``. Modules are imported lazily
by name, so ``ptebuild shims ...`` never pays for the build machinery (and nothing here
imports torch or executorch).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from ptebuild.errors import PtebuildError

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse
    from typing import Any


# Subcommand name -> module under ptebuild.cli that registers it.
SUBCOMMANDS = {
    "build": "build",
    "schema": "schema",
    "verify": "verify",
    "run": "run",
    "cache": "cache",
    "shims": "shims",
    "workers": "workers",
    "pack": "pack",
    "inspect": "inspect",
    "diff": "diff",
    "lock": "lock",
    "doctor": "doctor",
}

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that subcommand is registered (its module alone is
    imported, which keeps a no-op ``ptebuild build`` fast)."""
    from ptebuild._version import __version__
    from ptebuild.cli.parser import Parser

    parser = Parser(
        prog="ptebuild",
        description="Declarative, content-addressed builds of ExecuTorch .pte/.ptd artifacts.",
    )
    parser.add_argument("--version", action="version", version=f"ptebuild {__version__}")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=type(parser))
    subparsers.required = True
    names = [command] if command in SUBCOMMANDS else list(SUBCOMMANDS)
    for name in names:
        module = importlib.import_module(f"ptebuild.cli.{SUBCOMMANDS[name]}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ptebuild with ``argv`` (default: ``sys.argv[1:]``) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _quick_build_args(argv)
        if args is None:
            command = next((a for a in argv if not a.startswith("-")), None)
            parser = build_parser(command)
            args = parser.parse_args(argv)
    except PtebuildError as exc:  # a usage error (ptebuild.cli.parser.UsageExit), or from an argparse type= function
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help and --version
        return int(exc.code or 0)
    try:
        return int(args.handler(args) or 0)
    except PtebuildError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`ptebuild shims list X | head`): not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:
        if debug:
            import traceback

            traceback.print_exc()
        else:
            print(
                f"error: internal error: {type(exc).__name__}: {exc} (run with --debug for a traceback)",
                file=sys.stderr,
            )
        return EXIT_FAILED


def _quick_build_args(argv: list[str]) -> Any:
    """``ptebuild build``'s everyday command lines, read without building argparse's parser
    (:mod:`ptebuild.cli.build_quick`); None for any other."""
    from ptebuild.cli import build_quick

    values = build_quick.parse(argv)
    if values is None:
        return None
    from types import SimpleNamespace  # argparse's Namespace without argparse: the handlers read attributes

    from ptebuild.cli.build import build_command

    return SimpleNamespace(**values, handler=build_command)


def entrypoint() -> None:
    """The ``ptebuild`` program: :func:`main` on ``sys.argv``, stopped by SIGINT however it was started."""
    _interrupted_by_sigint()
    sys.exit(main())


def _interrupted_by_sigint() -> None:
    """Let SIGINT interrupt ptebuild (exit 130, workers stopped, no partial output) even where it
    was started with SIGINT ignored, as it is in the foreground.

    A shell starts each background job of a script (``ptebuild build ... &``, a CI runner's
    step) with SIGINT ignored, and Python keeps an inherited ``SIG_IGN``: the runner's or the
    user's SIGINT would then leave the build running to its end. ninja stops on SIGINT however
    it was started; so does ptebuild. Only the program does this, not :func:`main` (a caller's
    process keeps its own disposition)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
