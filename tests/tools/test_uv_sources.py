"""tools/uv_sources.py: pip's package sources, as ``./bootstrap.sh`` hands them to uv."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "uv_sources.py"
spec = importlib.util.spec_from_file_location("uv_sources", SCRIPT)
uv_sources = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_sources)

# `pip config list` on this kind of machine (the CPU torch wheel in /opt/wheels, two local indexes
# beside PyPI, a global cap on torch).
THIS_MACHINE = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.disable-pip-version-check='1'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/wheels'
"""


def test_this_machines_sources_become_uvs_options():
    assert uv_sources.uv_options(uv_sources.pip_settings(THIS_MACHINE)) == [
        "--index-strategy", "unsafe-best-match",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
        "--constraint", "/etc/xdg/pip/constraints.txt",
    ]


def test_the_environment_overrides_install_which_overrides_global():
    listing = (
        "global.index-url='https://global.example/simple'\n"
        "install.index-url='https://install.example/simple'\n"
        "global.find-links='/global'\n"
        ":env:.find-links='/env1 /env2'\n"
        "global.trusted-host='global.example'\n"
        "global.no-index='yes'\n"
    )
    assert uv_sources.uv_options(uv_sources.pip_settings(listing)) == [
        "--index-strategy", "unsafe-best-match",
        "--index-url", "https://install.example/simple",
        "--find-links", "/env1", "--find-links", "/env2",
        "--allow-insecure-host", "global.example",
        "--no-index",
    ]


def test_underscored_names_and_lines_that_are_not_settings():
    listing = "global.find_links='/a'\nnot a setting\nother.find-links='/ignored'\n"
    assert uv_sources.uv_options(uv_sources.pip_settings(listing)) == [
        "--index-strategy", "unsafe-best-match", "--find-links", "/a",
    ]


def test_reads_the_real_pips_configuration(tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text("[install]\nextra-index-url = file:///srv/index/simple\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=str(config), PIP_FIND_LINKS=str(tmp_path / "wheels"))
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, check=True)
    options = done.stdout.splitlines()
    assert options[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = set(zip(options[2::2], options[3::2]))
    assert ("--extra-index-url", "file:///srv/index/simple") in pairs
    assert ("--find-links", str(tmp_path / "wheels")) in pairs
