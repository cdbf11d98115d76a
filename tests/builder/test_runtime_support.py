"""A program's ``runtime`` record entry is read from its files once per content: kept in the
cache's memo under the outputs' digests, the writer and ptebuild's runtime code."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptebuild.builder import runtime_support
from ptebuild.builder.runtime_support import RuntimeSupportReader
from ptebuild.hashing import hash_file
from ptebuild.results import OutputFile


class Memo:
    def __init__(self) -> None:
        self.documents: dict[str, dict] = {}

    def memo_get(self, key: str) -> dict | None:
        return self.documents.get(key)

    def memo_put(self, key: str, document: dict) -> None:
        self.documents[key] = document


class Support:
    def __init__(self, names: list[str], writer: str | None) -> None:
        self.names, self.writer = names, writer

    def to_json(self) -> dict:
        return {"files": self.names, "writer": self.writer}


@pytest.fixture
def reads(monkeypatch):
    """The programs whose files were read (support_of_outputs replaced by a recorder)."""
    import ptebuild.runtime.compat as compat

    seen: list[list[str]] = []

    def support_of_outputs(folder, names, writer):
        seen.append(list(names))
        return Support(list(names), writer) if any(n.endswith(".pte") for n in names) else None

    monkeypatch.setattr(compat, "support_of_outputs", support_of_outputs)
    return seen


def outputs(folder: Path, **files: bytes) -> tuple[OutputFile, ...]:
    found = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        found.append(OutputFile(name, *hash_file(folder / name)))
    return tuple(found)


def test_the_files_are_read_once_per_content(tmp_path, reads):
    memo = Memo()
    reader = RuntimeSupportReader(tmp_path, memo, hash_file)
    files = outputs(tmp_path, **{"a.pte": b"pte", "a.ptd": b"ptd"})
    first = reader.of(files, "1.5.1")
    assert first == {"files": ["a.pte", "a.ptd"], "writer": "1.5.1"} and len(reads) == 1
    assert RuntimeSupportReader(tmp_path, memo, hash_file).of(files, "1.5.1") == first  # another build
    assert len(reads) == 1
    # Other bytes, another writer: read again.
    assert reader.of(outputs(tmp_path, **{"a.pte": b"pte2", "a.ptd": b"ptd"}), "1.5.1") is not None
    assert reader.of(files, "1.6.0") == {"files": ["a.pte", "a.ptd"], "writer": "1.6.0"}
    assert len(reads) == 3


def test_an_edit_to_the_runtime_readers_reads_again(tmp_path, reads, monkeypatch):
    memo = Memo()
    files = outputs(tmp_path, **{"a.pte": b"pte"})
    RuntimeSupportReader(tmp_path, memo, hash_file).of(files, None)
    code = RuntimeSupportReader(tmp_path, memo, hash_file).code()
    monkeypatch.setattr(runtime_support.own_code, "closure_digest", lambda *args, **kwargs: code + "-edited")
    RuntimeSupportReader(tmp_path, memo, hash_file).of(files, None)
    assert len(reads) == 2


def test_unreadable_outputs_are_not_kept_and_no_memo_reads_every_time(tmp_path, reads):
    memo = Memo()
    files = outputs(tmp_path, **{"a.ptd": b"ptd"})  # no .pte: nothing to say
    reader = RuntimeSupportReader(tmp_path, memo, hash_file)
    assert reader.of(files, None) is None and reader.of(files, None) is None
    assert len(reads) == 2 and [d for d in memo.documents.values() if "graph" not in d] == []  # ptebuild's import graph only
    bare = RuntimeSupportReader(tmp_path, None, hash_file)
    pte = outputs(tmp_path, **{"a.pte": b"pte"})
    assert bare.of(pte, None) == bare.of(pte, None)
    assert len(reads) == 4
