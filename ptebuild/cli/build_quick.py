"""``ptebuild build``'s common command lines read without argparse, so that a no-op build answers fast.

Building argparse's parser for ``build`` costs about 4 ms of imports (argparse, gettext, locale,
textwrap, shutil), a fifth of Python's own start-up, on every no-op build. The forms a build is
run with day to day (a manifest and a few switches) are read here instead; anything else (an
unknown option, a value that needs checking, ``--help``, two manifests) returns None and goes to
argparse, which owns every message. For every form read here the result is the namespace argparse
gives (``tests/cli/test_build_quick.py`` holds the two to each other, defaults included).

Read here: ``build MANIFEST`` with any of :data:`SWITCHES`, ``--out DIR``, ``--jobs N`` / ``-j N``
(a decimal integer) and ``--cache DIR``, each at most once.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time (the CLI's start-up)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

DEFAULTS: dict[str, Any] = {
    "command": "build",
    "debug": False,
    "manifest": None,
    "out": None,
    "only": None,
    "skip_backend": [],
    "keep_going": False,
    "json": False,
    "jobs": None,
    "explain": False,
    "timings": False,
    "locked": False,
    "reproduce": False,
    "check_renamed": False,
    "shard": None,
    "executor": None,
    "no_daemon": False,
    "ray_address": None,
    "cache": None,
    "no_cache": False,
    "remote_cache": None,
    "remote_cache_header": [],
    "remote_upload": None,
    "remote_secret_env": None,
}
"""What argparse's ``build`` parser gives for an option that is not on the command line."""

SWITCHES = {"--json": "json", "--keep-going": "keep_going", "--explain": "explain", "--no-daemon": "no_daemon",
            "--locked": "locked", "--timings": "timings"}
"""Options without a value, by the name argparse stores them under."""

_VALUED = {"--out": "out", "--cache": "cache", "--jobs": "jobs", "-j": "jobs"}


def parse(argv: Sequence[str]) -> dict[str, Any] | None:
    """The namespace (as a dict) argparse would give for ``argv``, or None when ``argv`` is not
    one of the forms read here (argparse then reads it)."""
    if len(argv) < 2 or argv[0] != "build":
        return None
    values = {key: (list(value) if isinstance(value, list) else value) for key, value in DEFAULTS.items()}
    seen: set[str] = set()
    rest = iter(argv[1:])
    for arg in rest:
        if arg in SWITCHES and arg not in seen:
            values[SWITCHES[arg]] = True
        elif arg in _VALUED and _VALUED[arg] not in seen:
            value = next(rest, None)
            if value is None or value.startswith("-"):
                return None
            if _VALUED[arg] == "jobs":
                if not value.isascii() or not value.isdecimal():
                    return None
                values["jobs"] = int(value)
            else:
                values[_VALUED[arg]] = value
            arg = _VALUED[arg]
        elif not arg.startswith("-") and values["manifest"] is None and arg:
            values["manifest"] = arg
            arg = "manifest"
        else:
            return None
        seen.add(arg)
    return values if values["manifest"] is not None else None
