"""Benchmark the remote cache tier: fetching the robot manifest's blobs from a real nginx, beside curl.

Run: ``.venv/bin/python bench/bench_remote.py [--runs 7] [--jobs 4]``

Starts Debian's nginx (WebDAV PUT) on a free loopback port in a temp folder, uploads random
blobs of the robot example's output sizes (13.6 MiB, 13.6 MiB, 3.8 MiB and a few small ones)
through ``HttpTier.blobs.put_many``, then, interleaved for ``--runs`` rounds, times:

- ``HttpTier.blobs.fetch_many`` in this process (a fresh tier each round: new session and
  connections; every blob streamed to a new file and its SHA-256 verified);
- the same through a new Python process (start-up + import + fetch), the way a CI runner's
  ``ptebuild build`` pays for it, beside ``python -c pass``;
- ``curl`` fetching the same URLs into files, one process: sequential over one connection, and
  ``--parallel`` (no hashing: curl does not verify).

Prints medians and the ratio to curl. Nothing is asserted; timings are page-cache warm on both
sides (nginx serves from memory), so they measure the client, not the disk.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "remote"))

from nginx_server import nginx_binary, start_nginx

from ptebuild.store.http import HttpTier

MIB = 1 << 20
SIZES = [int(13.6 * MIB), int(13.6 * MIB), int(3.8 * MIB), 75_040, 12_288, 4_096, 1_337]

CHILD = """
import sys
from pathlib import Path
from ptebuild.store.http import HttpTier
url, out, *digests = sys.argv[1:]
t = HttpTier(url, jobs={jobs})
assert all(t.blobs.fetch_many([(d, Path(out) / d) for d in digests]))
"""


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def fresh(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args(argv)
    if nginx_binary() is None:
        print("nginx is not installed (Debian: apt-get install nginx)", file=sys.stderr)
        return 2
    curl = shutil.which("curl")
    tmp = Path(tempfile.mkdtemp(prefix="ptebuild-bench-remote-"))
    server = start_nginx(tmp / "nginx")
    try:
        url = f"{server.url}/cache"
        src = fresh(tmp / "src")
        items = []
        for i, size in enumerate(SIZES):
            path = src / f"blob{i}"
            path.write_bytes(os.urandom(size))
            items.append((path, hashlib.sha256(path.read_bytes()).hexdigest()))
        uploader = HttpTier(url, jobs=args.jobs)
        uploader.blobs.put_many(items)
        uploader.close()
        digests = [d for _, d in items]
        total = sum(SIZES)
        child = CHILD.format(jobs=args.jobs)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}

        def tier_fetch() -> None:
            out = fresh(tmp / "tier")
            t = HttpTier(url, jobs=args.jobs)
            assert all(t.blobs.fetch_many([(d, out / d) for d in digests]))
            t.close()

        def process_fetch() -> None:
            out = fresh(tmp / "proc")
            subprocess.run([sys.executable, "-c", child, url, str(out), *digests], check=True, env=env)

        def python_start() -> None:
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def curl_args(out: Path) -> list[str]:
            argv = []
            for d in digests:
                argv += ["-o", str(out / d), f"{url}/cas/{d}"]
            return argv

        def curl_seq() -> None:
            out = fresh(tmp / "curl")
            subprocess.run([curl, "-sSf", *curl_args(out)], check=True)

        def curl_par() -> None:
            out = fresh(tmp / "curlp")
            subprocess.run(
                [curl, "-sSf", "--no-progress-meter", "--parallel", "--parallel-max", str(args.jobs), *curl_args(out)],
                check=True, stderr=subprocess.DEVNULL,
            )

        cases = {"HttpTier.fetch_many (in process)": tier_fetch, "python -c pass": python_start,
                 "python: import + fetch_many": process_fetch}
        if curl:
            cases |= {"curl (sequential, 1 process)": curl_seq, f"curl --parallel {args.jobs}": curl_par}
        for fn in cases.values():  # warm-up: page cache, imports
            fn()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.runs):
            for name, fn in cases.items():
                times[name].append(timed(fn))
        if curl:
            for d in digests:  # curl got the same bytes
                assert hashlib.sha256((tmp / "curl" / d).read_bytes()).hexdigest() == d

        print(f"{len(SIZES)} blobs, {total / MIB:.1f} MiB, from nginx on loopback; jobs={args.jobs}; "
              f"median of {args.runs} interleaved runs")
        med = {name: statistics.median(ts) for name, ts in times.items()}
        for name, m in med.items():
            rate = "" if name == "python -c pass" else f"  ({total / MIB / m:5.0f} MiB/s)"
            print(f"  {name:34s} {m * 1000:8.1f} ms{rate}")
        if curl:
            base = med[f"curl --parallel {args.jobs}"]
            tier = med["HttpTier.fetch_many (in process)"]
            print(f"  HttpTier / curl --parallel: {tier / base:.2f}x;  HttpTier / curl sequential: "
                  f"{tier / med['curl (sequential, 1 process)']:.2f}x")
            over = med["python: import + fetch_many"] - med["python -c pass"] - base
            print(f"  new process, beyond python start-up and curl's transfer: {over * 1000:.0f} ms")
        return 0
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
