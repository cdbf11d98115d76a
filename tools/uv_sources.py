"""pip's package sources as uv's options, so that uv installs from where pip would.

``python tools/uv_sources.py`` (``./bootstrap.sh`` runs it with the interpreter it makes the venv
from) prints the options for ``uv pip install``, one argument a line. uv reads none of pip's
configuration, and pip's is what makes an install on this machine right: ``PIP_FIND_LINKS`` and
``find-links`` in ``/etc/xdg/pip/pip.conf`` name ``/opt/wheels``, where torch 2.13.0's CPU build
lies; from PyPI alone ``torch==2.13.0`` is the CUDA build and its NVIDIA libraries, several GB.

Where pip's options come from: its configuration files (global, user, site: ``pip config debug``
lists them) and ``PIP_*`` environment variables. ``pip config list`` prints them merged, one
``SECTION.NAME='VALUE'`` a line, an environment variable as section ``:env:``. ``pip install``
takes each option from the environment, else from the ``[install]`` section, else ``[global]``.

=================== ===============================
pip                 uv
=================== ===============================
``index-url``       ``--index-url``
``extra-index-url`` ``--extra-index-url`` (each)
``find-links``      ``--find-links`` (each)
``no-index``        ``--no-index``
``constraint``      ``--constraint`` (each: this machine's caps torch at 2.14.1)
``trusted-host``    ``--allow-insecure-host`` (each)
=================== ===============================

pip weighs every index and link alike and takes the best candidate of all; uv's default stops at
the first index that has the package at all: ``--index-strategy unsafe-best-match`` is pip's way.
Certificates are not options of ``uv pip``: uv takes ``SSL_CERT_FILE`` from the environment.
"""

from __future__ import annotations

import ast
import subprocess
import sys

SECTIONS = ("global", "install", ":env:")
"""``pip config list``'s sections, each overriding those before it for ``pip install``."""

LISTS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
"""pip's options that hold a whitespace-separated list, and uv's option for each item."""


def pip_settings(listing: str) -> dict[str, str]:
    """The value ``pip install`` uses for each option, from the lines of ``pip config list``."""
    seen: dict[str, dict[str, str]] = {section: {} for section in SECTIONS}
    for line in listing.splitlines():
        key, equals, value = line.partition("=")
        section, dot, name = key.rpartition(".")
        if equals and dot and section in seen:
            seen[section][name.replace("_", "-")] = str(ast.literal_eval(value))
    settings: dict[str, str] = {}
    for section in SECTIONS:
        settings.update(seen[section])
    return settings


def uv_options(settings: dict[str, str]) -> list[str]:
    """``uv pip install``'s options for pip's ``settings`` (:func:`pip_settings`)."""
    options = ["--index-strategy", "unsafe-best-match"]
    if settings.get("index-url"):
        options += ["--index-url", settings["index-url"]]
    for name, flag in LISTS.items():
        for item in settings.get(name, "").split():
            options += [flag, item]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    return options


def main() -> int:
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"uv_sources: pip config list failed: {listed.stderr.strip()}", file=sys.stderr)
        return 1
    print("\n".join(uv_options(pip_settings(listed.stdout))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
