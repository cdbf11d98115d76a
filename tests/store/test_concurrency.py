"""Several real processes share one store: locks serialise work, puts never tear."""

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ptebuild.store import Store

REPO = Path(__file__).resolve().parents[2]
KEY = "c0ffee" * 8

WORKER = textwrap.dedent(
    """
    import os, sys, time
    from ptebuild.store import Store
    root, key, log, go = sys.argv[1:5]
    while not os.path.exists(go):  # start together
        time.sleep(0.001)
    store = Store(root)
    with store.lock(key):
        record = store.actions.get(key)
        if record is None:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, b"lowered\\n")
            os.close(fd)
            time.sleep(0.3)  # the others must wait, not redo the work
            digest = store.cas.put_bytes(b"program bytes" * 100000)
            record = {"outputs": [{"name": "p.pte", "digest": digest}]}
            store.actions.put(key, "p", record)
            store.record_miss()
        else:
            store.record_hit()
    digest = record["outputs"][0]["digest"]
    store.cas.restore(digest, os.path.join(os.path.dirname(log), f"out-{os.getpid()}.pte"))
    print(digest)
    """
)


def _spawn(args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def test_exactly_one_process_does_the_work(tmp_path):
    root, log, go = tmp_path / "cache", tmp_path / "log", tmp_path / "go"
    procs = [_spawn([WORKER, str(root), KEY, str(log), str(go)]) for _ in range(6)]
    go.touch()
    outs = [p.communicate(timeout=30) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert log.read_text() == "lowered\n"
    expected = hashlib.sha256(b"program bytes" * 100000).hexdigest()
    assert {out.strip() for out, _ in outs} == {expected}
    for out in tmp_path.glob("out-*.pte"):
        assert out.read_bytes() == b"program bytes" * 100000
    stats = Store(root).stats()
    assert (stats["hits"], stats["misses"], stats["entries"], stats["blobs"]) == (5, 1, 1, 1)


PUTTER = textwrap.dedent(
    """
    import sys
    from ptebuild.store import Store
    store = Store(sys.argv[1])
    src = sys.argv[2]
    for i in range(20):
        store.cas.put_file(src)
        store.digest_file(src)
        store.actions.put("ab" * 16, f"p{i % 3}", {"i": i})
    """
)


def test_concurrent_puts_of_the_same_content(tmp_path):
    root = tmp_path / "cache"
    src = tmp_path / "blob"
    data = os.urandom(2 << 20)
    src.write_bytes(data)
    procs = [_spawn([PUTTER, str(root), str(src)]) for _ in range(4)]
    outs = [p.communicate(timeout=30) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    store = Store(root)
    report = store.verify()
    assert report.corrupt == () and report.blobs_checked == 1 and report.records_checked == 1
    assert store.actions.get("ab" * 16) is not None
