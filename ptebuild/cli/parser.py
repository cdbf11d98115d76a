"""The CLI's argparse parser class: one that raises instead of exiting, so that ``main()`` owns
the exit code. Its own module: a no-op build reads its command line without argparse
(:mod:`ptebuild.cli.build_quick`) and never imports this."""

from __future__ import annotations

import argparse

from ptebuild.errors import UsageError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]
    """What each subcommand module's ``register`` adds its parser to."""


class UsageExit(UsageError):
    """A command line argparse refused (exit 2)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageExit` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageExit(f"{self.prog}: {message}")
