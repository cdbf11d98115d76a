"""Benchmark the store's hashing: first-time SHA-256 of a 1 GB file, then the stat-cache path.

Run: ``.venv/bin/python bench/bench_hashing.py [--size-mb 1024] [--runs 3]``

Prints, for the same file (page cache warm after the write, so this measures the hash, not the
disk): our ``hashing.hash_file`` and ``Store.digest_file`` (fresh stat cache) against
``hashlib.file_digest`` and ``sha256sum``, median of ``--runs``; then ``digest_file`` again on
the unchanged file through the stat cache (time and bytes read, from /proc/self/io ``rchar``).
The file is aged by an hour first: a file modified in the last 2 s is "racy" and always rehashed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptebuild import hashing
from ptebuild.store import Store


def rchar() -> int:
    """Bytes this process has read through read syscalls so far (Linux), or -1."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def median_time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="ptebuild-bench-"))
    try:
        path = tmp / "weights.bin"
        block = os.urandom(64 << 20)
        size = args.size_mb << 20
        with open(path, "wb") as f:
            written = 0
            while written < size:
                n = min(len(block), size - written)
                f.write(block[:n])
                written += n
        hour_ago = time.time() - 3600
        os.utime(path, (hour_ago, hour_ago))
        gb = size / 1e9

        with open(path, "rb") as f:
            expected = hashlib.file_digest(f, "sha256").hexdigest()  # also warms the page cache

        def ours() -> None:
            assert hashing.hash_file(path)[0] == expected

        def file_digest() -> None:
            with open(path, "rb") as f:
                assert hashlib.file_digest(f, "sha256").hexdigest() == expected

        def fresh_store() -> None:
            shutil.rmtree(tmp / "cache", ignore_errors=True)
            store = Store(tmp / "cache")
            assert store.digest_file(path)[0] == expected
            store.close()

        rows = [
            ("ptebuild hashing.hash_file", median_time(ours, args.runs)),
            ("ptebuild Store.digest_file (cold)", median_time(fresh_store, args.runs)),
            ("hashlib.file_digest (baseline)", median_time(file_digest, args.runs)),
        ]
        if shutil.which("sha256sum"):
            def sha256sum() -> None:
                out = subprocess.run(["sha256sum", str(path)], capture_output=True, check=True)
                assert out.stdout.split()[0].decode() == expected

            rows.append(("sha256sum (baseline)", median_time(sha256sum, args.runs)))

        print(f"file: {size / 1e9:.3f} GB ({args.size_mb} MiB), median of {args.runs} runs, page cache warm")
        for name, seconds in rows:
            print(f"  {name:36s} {seconds:7.3f} s  {gb / seconds:6.2f} GB/s")

        store = Store(tmp / "cache")
        store.digest_file(path)  # make sure the entry exists
        before = rchar()
        t0 = time.perf_counter()
        digest, _ = store.digest_file(path)
        seconds = time.perf_counter() - t0
        read = rchar() - before
        assert digest == expected
        times = []
        for _ in range(max(args.runs, 5)):
            t0 = time.perf_counter()
            store.digest_file(path)
            times.append(time.perf_counter() - t0)
        print("unchanged file through the stat cache:")
        print(f"  first lookup {seconds * 1e3:.3f} ms, median {statistics.median(times) * 1e3:.3f} ms,"
              f" bytes read {read} (all syscall reads of the process, incl. /proc/self/io itself)")
        store.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
