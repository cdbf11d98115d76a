import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptebuild.errors import StoreError
from ptebuild.store import Store, actions

KEY = "0123456789abcdef" * 4
D1, D2 = "1" * 64, "2" * 64


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "cache")


def _record(digest=D1):
    return {
        "outputs": [{"name": "policy.pte", "digest": digest, "size": 10}],
        "check": {"max_abs": 1e-6},
        "inputs": {"model": "deadbeef", "options": {"backend": "xnnpack"}},
    }


def test_round_trip_and_last_for(store):
    assert store.actions.get(KEY) is None
    store.actions.put(KEY, "policy", _record())
    assert store.actions.get(KEY) == _record()
    assert store.actions.last_for("policy") == _record()
    assert store.actions.last_for("other") is None
    key2 = "f" * 64
    store.actions.put(key2, "policy", _record(D2))
    assert store.actions.last_for("policy") == _record(D2)
    assert store.actions.get(KEY) == _record()  # the old record stays


def test_layout_and_refs(store):
    store.actions.put(KEY, "policy", _record())
    path = store.root / "actions" / KEY[:2] / f"{KEY}.json"
    raw = path.read_bytes()
    assert raw.startswith(b"ptebuild-action 1 ")
    assert actions.decode(raw)["refs"] == [D1]
    assert (store.root / "last" / "policy.key").read_text() == f"{KEY} policy\n"
    assert [k for k, _ in store.actions] == [KEY]
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_unsafe_program_names_are_hashed(store):
    store.actions.put(KEY, "../evil name", _record())
    assert store.actions.last_for("../evil name") == _record()
    names = [p.name for p in (store.root / "last").iterdir()]
    assert len(names) == 1 and names[0].startswith("h-")


def test_explicit_refs(store):
    store.actions.put(KEY, "p", {"whatever": 1}, refs=[D2, D2])
    assert store.actions.read(KEY)["refs"] == [D2]
    with pytest.raises(StoreError, match="not a SHA-256"):
        store.actions.put(KEY, "p", {}, refs=["nope"])


@pytest.mark.parametrize("key", ["", "ABCDEF0123456789", "abc", "g" * 32, "../" + "a" * 30])
def test_bad_keys_are_refused(store, key):
    with pytest.raises(StoreError, match="not a valid action key"):
        store.actions.get(key)


def test_unserialisable_record_is_a_store_error(store):
    with pytest.raises(StoreError, match="not JSON-serialisable"):
        store.actions.put(KEY, "p", {"x": object()})


def test_every_truncation_is_a_miss(store):
    store.actions.put(KEY, "policy", _record())
    path = store.actions.path(KEY)
    raw = path.read_bytes()
    for n in range(len(raw)):
        path.write_bytes(raw[:n])
        assert store.actions.get(KEY) is None, n
    assert not path.exists()  # a damaged record is removed on sight


def test_every_flipped_byte_is_a_miss(store):
    store.actions.put(KEY, "policy", _record())
    path = store.actions.path(KEY)
    raw = path.read_bytes()
    for i in range(0, len(raw), 3):
        bad = bytearray(raw)
        bad[i] ^= 0x20
        path.write_bytes(bytes(bad))
        assert store.actions.read(KEY) is None, i


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00" * 50,
        b"ptebuild-action 2 " + b"0" * 64 + b"\n{}\n",
        b"other-magic 1 " + b"0" * 64 + b"\n{}\n",
        actions.encode({"key": KEY, "record": [], "refs": []}),
        actions.encode({"key": KEY, "record": {}, "refs": ["x"]}),
        actions.encode({"key": "f" * 64, "record": {}, "refs": []}),  # another key's record
    ],
)
def test_bad_record_files_are_misses(store, raw):
    path = store.actions.path(KEY)
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    assert store.actions.get(KEY) is None


def test_get_refreshes_last_use(store):
    store.actions.put(KEY, "p", _record())
    path = store.actions.path(KEY)
    os.utime(path, (1000, 1000))
    store.actions.get(KEY)
    assert path.stat().st_mtime > time.time() - 60
    os.utime(path, (1000, 1000))
    store.actions.last_for("p")  # reading for --explain is not a use
    assert path.stat().st_mtime == 1000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(record=st.dictionaries(st.text(max_size=8), json_values, max_size=5))
def test_round_trip_property(tmp_path_factory, record):
    store = Store(tmp_path_factory.mktemp("c"))
    store.actions.put(KEY, "p", record)
    assert store.actions.get(KEY) == record
