"""A writer killed with SIGKILL at random moments leaves the store consistent."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ptebuild.store import Store, maintenance

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import os, sys
    from ptebuild.store import Store
    store = Store(sys.argv[1])
    src = sys.argv[2]
    i = 0
    while True:
        i += 1
        with open(src, "r+b") as f:  # new content every round
            f.write(i.to_bytes(8, "little"))
        digest, size = store.cas.put_file(src)
        data = os.urandom(1 << 20)
        d2 = store.cas.put_bytes(data)
        key = "%032x" % i
        store.actions.put(key, "p", {"outputs": [{"digest": digest}, {"digest": d2}]})
        store.digest_file(src)
        print(i, flush=True)
    """
)


def test_sigkill_at_random_moments_leaves_the_store_clean(tmp_path):
    root = tmp_path / "cache"
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(24 << 20))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    rng = random.Random(1234)
    for _ in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(src)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        time.sleep(rng.uniform(0.15, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read()

    store = Store(root)
    blobs = list(store.cas)
    records = list(store.actions)
    assert blobs and records
    report = store.verify()
    assert report.corrupt == (), report
    assert report.blobs_checked == len(blobs)
    for key, _ in records:
        record = store.actions.get(key)
        assert record is not None
        for out in record["outputs"]:
            assert store.cas.has(out["digest"])
    # Stray temp files are invisible to readers and removed by gc once old.
    temps = list(root.rglob("*.tmp"))
    report = maintenance.gc(store, 1 << 40, now=time.time() + 7200)
    assert report.temps_removed == len(temps)
    assert not list(root.rglob("*.tmp"))
