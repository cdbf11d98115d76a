"""The provenance statement: in-toto Statement v1 / SLSA Provenance v1 shape, deterministic."""

from __future__ import annotations

import json
import re

from ptebuild.release.lock import lock_entries_from_record
from ptebuild.release.provenance import (
    BUILD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    dumps_statement,
    provenance_statement,
    subjects_of,
)

RECORD = {
    "a": {
        "kind": "program",
        "backend": "portable",
        "key": "1" * 32,
        "inputs": {
            "source:m/model.py": "a" * 64,
            "weights:w/a.pt": "b" * 64,
            "toolchain.torch": "2.13.0+cpu",
            "toolchain.platform": "linux-x86_64",
            "manifest.model.seed": "1",
        },
        "deps": {"sources": {"m/layers.py": "c" * 64}, "dists": {"torchao": "0.18.0"}},
        "outputs": {"a.pte": {"sha256": "d" * 64, "bytes": 10}},
    },
    "b": {
        "kind": "program",
        "backend": "xnnpack",
        "key": "2" * 32,
        "inputs": {"source:m/model.py": "a" * 64, "toolchain.torch": "2.13.0+cpu", "toolchain.platform": "darwin-arm64"},
        "outputs": {"b.pte": {"sha256": "e" * 64, "bytes": 11}},
    },
}
SUBJECTS = [("b.pte", "e" * 64), ("a.pte", "d" * 64)]


def statement(**kwargs) -> dict:
    return provenance_statement(SUBJECTS, "tiny.toml", "f" * 64, lock_entries_from_record(RECORD), **kwargs)


def test_statement_shape():
    s = statement()
    assert set(s) == {"_type", "subject", "predicateType", "predicate"}
    assert (s["_type"], s["predicateType"]) == (STATEMENT_TYPE, PREDICATE_TYPE)
    assert s["_type"] == "https://in-toto.io/Statement/v1" and s["predicateType"] == "https://slsa.dev/provenance/v1"
    assert s["subject"] == [{"name": "a.pte", "digest": {"sha256": "d" * 64}}, {"name": "b.pte", "digest": {"sha256": "e" * 64}}]
    assert set(s["predicate"]) == {"buildDefinition", "runDetails"}
    definition = s["predicate"]["buildDefinition"]
    assert set(definition) == {"buildType", "externalParameters", "internalParameters", "resolvedDependencies"}
    assert definition["buildType"] == BUILD_TYPE and BUILD_TYPE.startswith("https://")
    assert definition["externalParameters"] == {
        "manifest": {"path": "tiny.toml", "digest": {"sha256": "f" * 64}},
        "targets": ["a", "b"],
    }
    internal = definition["internalParameters"]
    assert internal["toolchain"] == {"torch": "2.13.0+cpu"}  # shared; the platform differs per target
    assert internal["targets"]["a"] == {"kind": "program", "backend": "portable", "key": "1" * 32, "toolchain": {"platform": "linux-x86_64"}}
    run = s["predicate"]["runDetails"]
    assert re.fullmatch(r"https://\S+", run["builder"]["id"]) and run["metadata"] == {}


def test_resolved_dependencies_are_merged_with_digests_and_purls():
    deps = statement()["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps == [
        {"name": "pypi:torchao", "uri": "pkg:pypi/torchao@0.18.0", "annotations": {"targets": ["a"]}},
        {"name": "source:m/layers.py", "digest": {"sha256": "c" * 64}, "annotations": {"targets": ["a"]}},
        {"name": "source:m/model.py", "digest": {"sha256": "a" * 64}, "annotations": {"targets": ["a", "b"]}},
        {"name": "weights:w/a.pt", "digest": {"sha256": "b" * 64}, "annotations": {"targets": ["a"]}},
    ]
    for dep in deps:  # a ResourceDescriptor needs a uri or a digest
        assert "uri" in dep or "digest" in dep


def test_deterministic_and_timed_only_by_source_date_epoch():
    assert dumps_statement(statement()) == dumps_statement(statement())
    assert b"On" not in dumps_statement(statement())
    timed = statement(source_date_epoch=1700000000)["predicate"]["runDetails"]["metadata"]
    assert timed == {"startedOn": "2023-11-14T22:13:20Z", "finishedOn": "2023-11-14T22:13:20Z"}
    text = dumps_statement(statement())
    assert text.endswith(b"\n") and json.loads(text) == statement()


def test_subjects_of_reads_back_or_names_the_problem():
    assert subjects_of(statement()) == {"a.pte": "d" * 64, "b.pte": "e" * 64}
    assert subjects_of({"_type": "x"}) == f"_type is not {STATEMENT_TYPE!r}"
    bad = statement()
    bad["subject"][1] = {"name": "b.pte"}
    assert subjects_of(bad) == "subject[1] needs a name and a sha256 digest"
