"""``ptebuild doctor``: the table and the JSON document."""

from __future__ import annotations

import json
import re

from helpers import ptebuild


def test_table_and_json(tmp_path):
    table = ptebuild("doctor", "--cache", tmp_path)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["backend", "lower", "check", "why"]
    rows = {line.split()[0]: line for line in lines[1:] if line.strip() and ":" not in line.split()[0]}
    assert rows["portable"].split()[:4] == ["portable", "yes", "yes", "(executorch-runtime)"]
    assert rows["cuda"].split()[:3] == ["cuda", "no", "no"] and rows["cuda"].endswith("built on a machine with a CUDA GPU")
    assert any(line.startswith("toolchain.torch: 2.13.0") for line in lines)
    document = json.loads(ptebuild("doctor", "--json", "--cache", tmp_path).stdout)
    assert {"portable", "xnnpack", "cuda"} <= {row["backend"] for row in document["backends"]}
    assert document["toolchain"]["toolchain.executorch"] == "1.5.1"


def test_digests_only_with_verbose(tmp_path):
    """The digests the verdicts are kept under mean nothing to a user: --verbose shows them."""
    plain = ptebuild("doctor", "--no-probe", "--cache", tmp_path)
    verbose = ptebuild("doctor", "--no-probe", "--verbose", "--cache", tmp_path)
    assert plain.returncode == verbose.returncode == 0, plain.stderr + verbose.stderr
    digest = re.compile(r"^[\w.-]+: [0-9a-f]{32,64}$")
    assert not [line for line in plain.stdout.splitlines() if digest.match(line) or line.startswith("verdicts: ")]
    assert any(line.startswith("probe-code: ") for line in verbose.stdout.splitlines())
    assert set(plain.stdout.splitlines()) < set(verbose.stdout.splitlines())
    assert any(line.startswith("toolchain.torch: 2.13.0") for line in plain.stdout.splitlines())
