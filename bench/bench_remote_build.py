"""Benchmark (not a test): runner B restoring the robot manifest from a remote cache runner A filled.

Run: ``.venv/bin/python bench/bench_remote_build.py [--runs 7]``. Starts Debian's nginx (WebDAV
PUT) on a free loopback port; runner A builds ``manifests/robot.toml`` into its own cache and
output folder with ``--remote-cache``, uploading everything. Then, interleaved for ``--runs``
rounds, each with a fresh local cache and output folder:

- runner B: ``ptebuild build manifests/robot.toml --remote-cache URL --json`` (every program must
  come back ``cached`` from ``remote``, its files byte-identical to A's);
- ``python -c pass`` (the same interpreter's start-up);
- ``curl`` fetching every file A put on the server (the same entries and blobs B downloads), into
  fresh files, over one connection.

Target (issue 9): runner B's median <= Python start-up + transfer (curl) + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "remote"))

from nginx_server import nginx_binary, start_nginx

BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python" if (BIN / "python").exists() else Path(sys.executable)
PTEBUILD = BIN / "ptebuild" if (BIN / "ptebuild").exists() else Path(sys.executable).with_name("ptebuild")
MANIFEST = ROOT / "manifests" / "robot.toml"
ENV = {**os.environ, "PTEBUILD_NO_DAEMON": "1", "PYTHONWARNINGS": "ignore"}


def run(command: list) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=ENV)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds, done


def files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".pte", ".ptd")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    if nginx_binary() is None or shutil.which("curl") is None:
        sys.exit("bench: needs nginx and curl (./bootstrap.sh --test installs nginx)")
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-remote-build-") as tmp:
        tmp = Path(tmp)
        server = start_nginx(tmp / "nginx")
        try:
            url = f"{server.url}/robot"
            cold, _ = run([PTEBUILD, "build", MANIFEST, "--cache", tmp / "a-cache", "--out", tmp / "a-out",
                           "--remote-cache", url, "--json"])
            print(f"runner A: cold build and upload in {cold:.1f} s", flush=True)
            stored = sorted(p.relative_to(server.root / "robot") for p in (server.root / "robot").rglob("*") if p.is_file())
            total = sum((server.root / "robot" / p).stat().st_size for p in stored)
            print(f"on the server: {len(stored)} files, {total / 2**20:.1f} MiB", flush=True)
            expected = files(tmp / "a-out")
            b_ms, python_ms, curl_ms = [], [], []
            for i in range(args.runs):
                cache, out, fetched = tmp / f"b-cache-{i}", tmp / f"b-out-{i}", tmp / f"curl-{i}"
                fetched.mkdir()
                curl = ["curl", "--silent", "--fail"]
                for n, p in enumerate(stored):
                    curl += ["-o", fetched / str(n), f"{url}/{p.as_posix()}"]
                rounds = [
                    ("b", [PTEBUILD, "build", MANIFEST, "--cache", cache, "--out", out, "--remote-cache", url, "--json"]),
                    ("python", [PYTHON, "-c", "pass"]),
                    ("curl", curl),
                ]
                for name, command in rounds if i % 2 == 0 else reversed(rounds):
                    seconds, done = run(command)
                    {"b": b_ms, "python": python_ms, "curl": curl_ms}[name].append(seconds * 1000)
                    if name == "b":
                        programs = json.loads(done.stdout)["targets"]
                        if any((p["status"], p.get("source")) != ("cached", "remote") for p in programs):
                            sys.exit(f"bench: runner B did not restore everything from the remote: {programs}")
                        if files(out) != expected:
                            sys.exit("bench: runner B's files differ from runner A's")
                shutil.rmtree(cache)
                shutil.rmtree(out)
                shutil.rmtree(fetched)
        finally:
            server.stop()
    b, python, curl = (statistics.median(x) for x in (b_ms, python_ms, curl_ms))
    overhead = b - python - curl
    print()
    print(f"runner B (median of {args.runs})     {b:8.1f} ms   every program cached from remote, bytes = A's")
    print(f"python -c pass                 {python:8.1f} ms")
    print(f"curl, same files               {curl:8.1f} ms")
    print(f"B - start-up - transfer        {overhead:8.1f} ms   target <= 1000 ms: {'ok' if overhead <= 1000 else 'MISSED'}")
    return 0 if overhead <= 1000 else 1


if __name__ == "__main__":
    sys.exit(main())
