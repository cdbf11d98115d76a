"""Publishing into the output folder, and the copies made ahead while a program's check runs.

A worker says when a program's outputs are in the build's store, before its check: the publisher
copies them into the staging area on a thread, and renames them into place only when the result
comes (a language model's gigabyte weights file is written while it generates). Real stores and
output folders here; no worker (the executors' tests carry the news from real ones).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from project_copy import copy_project

from ptebuild.builder.context import BuildContext, BuildOptions
from ptebuild.builder.publish import Publisher, StoreBlobs
from ptebuild.errors import CorruptObject
from ptebuild.manifest import load_manifest
from ptebuild.results import ActionResult, OutputFile


@pytest.fixture
def built(tmp_path):
    """A build's context (the tiny project, no cache: the build's own store), its publisher, and
    a result of two files in its store."""
    plan = load_manifest(str(copy_project(tmp_path / "project")))
    context = BuildContext(plan, BuildOptions(out_dir=tmp_path / "out"), report=lambda *event: None)
    context.folder.path.mkdir()
    store = context.store()
    outputs = []
    for name, data in (("lib.a", os.urandom(3 << 20)), ("lib.def", b"EXPORTS\n")):
        source = tmp_path / name
        source.write_bytes(data)
        digest, size = store.put_file(source)
        outputs.append(OutputFile(name, digest, size))
    result = ActionResult(key="k" * 64, target="lib", kind="shims", outputs=tuple(outputs))
    return context, Publisher(context), store, result


def staged_files(context: BuildContext) -> list[str]:
    """Every file under the output folder's staging area but the build's own store."""
    root = context.folder.path / ".ptebuild-staging"
    return sorted(p.name for p in root.rglob("*") if p.is_file() and "objects" not in p.relative_to(root).parts[1])


def test_copied_ahead_outputs_appear_only_when_the_result_is_published(built, tmp_path):
    context, publisher, store, result = built
    publisher.copy_ahead("lib", result.outputs, store)
    publisher._ahead["lib"].thread.join()
    assert sorted(p.name for p in context.folder.path.iterdir()) == [".ptebuild-staging"]  # nothing in place yet
    assert staged_files(context) == ["lib.a", "lib.def"]
    publisher.publish("lib", result, StoreBlobs(store))
    for output in result.outputs:
        assert (context.folder.path / output.name).read_bytes() == (tmp_path / output.name).read_bytes()
    assert staged_files(context) == []


def test_the_copies_of_a_failed_program_are_removed_and_nothing_is_published(built):
    context, publisher, store, result = built
    publisher.copy_ahead("lib", result.outputs, store)
    publisher.discard("lib")
    assert staged_files(context) == []
    assert not (context.folder.path / "lib.a").exists()
    publisher.discard("lib")  # twice: nothing left to remove


def test_a_result_naming_other_bytes_is_published_from_its_own(built, tmp_path):
    # The copy ahead was of other bytes than the result names: the result's own are published.
    context, publisher, store, result = built
    other = tmp_path / "other"
    other.write_bytes(b"other bytes")
    digest, size = store.put_file(other)
    publisher.copy_ahead("lib", (OutputFile("lib.a", digest, size),), store)
    publisher.publish("lib", result, StoreBlobs(store))
    assert (context.folder.path / "lib.a").read_bytes() == (tmp_path / "lib.a").read_bytes()
    assert (context.folder.path / "lib.def").read_bytes() == b"EXPORTS\n"
    assert staged_files(context) == []


def test_a_corrupt_blob_is_never_published_from_a_copy_ahead(built):
    context, publisher, store, result = built
    blob = store.path(result.outputs[0].sha256)
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as damaged:
        damaged.write(b"\0" * 16)
    publisher.copy_ahead("lib", result.outputs, store)
    with pytest.raises(CorruptObject):
        publisher.publish("lib", result, StoreBlobs(store))
    assert not (context.folder.path / "lib.a").exists()
    assert staged_files(context) == []


def test_outputs_already_in_place_are_not_copied_again(built):
    context, publisher, store, result = built
    publisher.publish("lib", result, StoreBlobs(store))
    before = {o.name: (context.folder.path / o.name).stat().st_ino for o in result.outputs}
    publisher.copy_ahead("lib", result.outputs, store)
    assert "lib" not in publisher._ahead
    publisher.publish("lib", result, StoreBlobs(store))
    assert {o.name: (context.folder.path / o.name).stat().st_ino for o in result.outputs} == before


def test_a_program_of_a_shared_weights_group_is_not_copied_ahead(tmp_path):
    manifest = copy_project(tmp_path / "project")
    manifest.write_text(manifest.read_text().replace("tiny_portable_weights", "tiny_weights")
                        .replace("tiny_xnnpack_weights", "tiny_weights"))
    context = BuildContext(load_manifest(str(manifest)), BuildOptions(out_dir=tmp_path / "out"), report=lambda *event: None)
    context.folder.path.mkdir()
    store = context.store()
    (tmp_path / "w").write_bytes(b"weights")
    digest, size = store.put_file(tmp_path / "w")
    publisher = Publisher(context)
    publisher.copy_ahead("tiny_portable", (OutputFile("tiny_portable_weights.ptd", digest, size),), store)
    assert publisher._ahead == {}  # its .ptd is merged with the group's, not published


def test_a_blob_missing_from_the_store_leaves_publishing_to_its_own_error(built):
    context, publisher, store, result = built
    store.remove(result.outputs[0].sha256)
    publisher.copy_ahead("lib", result.outputs, store)
    with pytest.raises(CorruptObject):
        publisher.publish("lib", result, StoreBlobs(store))
    assert not Path(context.folder.path / "lib.a").exists()
