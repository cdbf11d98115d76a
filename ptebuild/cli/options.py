"""Options that several subcommands share, declared once."""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    import argparse

CACHE_HELP = "cache folder (default: $PTEBUILD_CACHE or ~/.cache/ptebuild)"


def add_cache_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, no_cache: bool = False, help: str = CACHE_HELP) -> None:
    """``--cache DIR`` (and, with ``no_cache``, ``--no-cache`` as its alternative)."""
    if no_cache:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--cache", metavar="DIR", help=help)
        group.add_argument("--no-cache", action="store_true", help="build without reading or writing the cache")
    else:
        parser.add_argument("--cache", metavar="DIR", help=help)
