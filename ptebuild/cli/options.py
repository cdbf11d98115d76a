"""Options that several subcommands share, declared once."""

from __future__ import annotations

CACHE_HELP = "cache folder (default: $PTEBUILD_CACHE or ~/.cache/ptebuild)"


def add_cache_options(parser, *, no_cache: bool = False, help: str = CACHE_HELP) -> None:
    """``--cache DIR`` (and, with ``no_cache``, ``--no-cache`` as its alternative)."""
    if no_cache:
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--cache", metavar="DIR", help=help)
        group.add_argument("--no-cache", action="store_true", help="build without reading or writing the cache")
    else:
        parser.add_argument("--cache", metavar="DIR", help=help)
