"""Benchmark (not a test): CUDA lowering of ``manifests/robot_cuda.toml`` on a machine with a GPU.

Run: ``python bench/bench_cuda.py [--json FILE]``. Everything goes to a fresh temporary folder:

* cold: ``ptebuild build --json`` with an empty ptebuild cache and empty Inductor and Triton
  caches (lowering, the GPU check, publishing), as on a fresh machine;
* cached: the same command again in a new process (nothing to lower);
* clean: a second build into another folder with ``--no-cache``, Inductor's and Triton's caches
  emptied again (at the same path: another machine of the same kind), to compare the
  ``.pte``/``.ptd`` bytes with the cold build's;
* warm-inductor: ``--no-cache`` once more, Inductor's caches kept (ptebuild lowers again;
  Inductor reuses its compiled kernels);
* baseline: ``python -c pass`` (interpreter start-up).

The builds run ``python -m ptebuild`` as subprocesses, one worker (``--jobs 1``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "cuda"))
from gpu_build import build_cli, sha256

MANIFEST = ROOT / "manifests" / "robot_cuda.toml"


def _python_start() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.monotonic() - started


def _hashes(folder: Path) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.suffix in (".pte", ".ptd")}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict = {"python_start_seconds": min(_python_start() for _ in range(3))}

    def save() -> None:
        if args.json:  # after each step: a run stopped at its time limit keeps what it measured
            args.json.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")

    with tempfile.TemporaryDirectory(prefix="bench-cuda-") as tmp:
        tmp = Path(tmp)
        steps = (  # name, output folder, ptebuild cache, empty Inductor's first
            ("cold", "out1", tmp / "cache", True),
            ("cached", "out1", tmp / "cache", False),
            ("clean", "out2", None, True),
            ("warm-inductor", "out3", None, False),
        )
        compiled = tmp / "compiled"
        env = {"TORCHINDUCTOR_CACHE_DIR": str(compiled / "inductor"), "TRITON_CACHE_DIR": str(compiled / "triton")}
        for name, out, cache, empty in steps:
            if empty:
                shutil.rmtree(compiled, ignore_errors=True)
            figures[name] = build_cli(MANIFEST, tmp / out, cache, env=env)
            figures[f"sha256_{name}"] = _hashes(tmp / out) if (tmp / out).is_dir() else {}
            print(f"{name:7s} rc={figures[name]['rc']} {figures[name]['seconds']:7.2f} s", flush=True)
            save()
    first, second = figures["sha256_cold"], figures["sha256_clean"]
    figures["byte_identical"] = bool(first) and first == second == figures["sha256_warm-inductor"]
    print(f"python -c pass {figures['python_start_seconds']:.3f} s; byte identical: {figures['byte_identical']}")
    for file, digest in first.items():
        print(f"  {file} {digest} {'==' if second.get(file) == digest else '!='} {second.get(file)}")
    save()
    return 0 if all(figures[name]["rc"] == 0 for name, *_ in steps) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
