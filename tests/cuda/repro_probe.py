"""On the GPU machine: is a CUDA lowering byte-reproducible, and if not, which part differs?

    python tests/cuda/repro_probe.py OUT.json [--runs N] [--seeds S,S,..] [--same-path | --parallel]
                                               [--save DIR] [--manifest M --program P]

Lowers PROGRAM (default ``tiny_cuda_a`` of ``tiny_cuda.toml``) N times (default 2), each in a
fresh process with empty Inductor and Triton caches (as on another machine: nothing tuned or
compiled before). ``--same-path``: every run's caches are at one path, emptied before each run
(what two machines of one kind see); otherwise each run has its own path, and ``--parallel``
runs them all at once. ``--seeds``: each run's ``PYTHONHASHSEED`` (and so N). Each run also
checks the program on the GPU (``build_direct``). Then compares the ``.pte``, the ``.ptd`` and the
compiled ``.so`` inside each ``.pte`` section by section (ELF), and says whether a run's cache
folder appears inside its ``.so`` (a path baked into the code).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BUILD = """
import sys, json
sys.path.insert(0, {here!r})
from gpu_build import build_direct
print(json.dumps(build_direct({manifest!r}, {out!r}, only=[{program!r}])[{program!r}]))
"""


def sections(so: bytes) -> dict[str, str]:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(so))
    return {s.name: f"{s.data_size}:{hashlib.sha256(s.data()).hexdigest()[:16]}" for s in elf.iter_sections()}


def _start(tmp: Path, i: int, args) -> tuple[subprocess.Popen, Path, Path, float]:
    import shutil

    out = tmp / f"run{i}"
    caches = tmp / ("caches-shared" if args.same_path else f"caches-for-run-{i}")
    shutil.rmtree(caches, ignore_errors=True)
    env = dict(
        os.environ,
        TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"),
        TRITON_CACHE_DIR=str(caches / "triton"),
    )
    if args.seeds:
        env["PYTHONHASHSEED"] = args.seeds[i]
    code = BUILD.format(here=str(HERE), manifest=str(args.manifest), out=str(out), program=args.program)
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    return process, out, caches, time.monotonic()


def _listing(folder: Path) -> dict[str, str]:
    """Every file under ``folder``: relative path -> size and start of its SHA-256."""
    return {
        str(path.relative_to(folder)): f"{path.stat().st_size}:{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
        for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()
    }


def _finish(started, args) -> dict:
    from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data

    process, out, caches, at = started
    stdout, stderr = process.communicate()
    run = {"seconds": time.monotonic() - at, "rc": process.returncode}
    if process.returncode:
        run["stderr"] = stderr[-3000:]
        return run
    run.update(json.loads(stdout.strip().splitlines()[-1]))
    pte = out / f"{args.program}.pte"
    run["so_sections"] = {}
    run["cache_path_in_so"] = False
    for delegate in read_cuda_delegates(pte):
        so = read_pte_named_data(pte, delegate.payload.so_blob_key)
        run[f"so_key_{delegate.method}"] = delegate.payload.so_blob_key
        run["so_sections"].update({f"{delegate.method}:{k}": v for k, v in sections(so).items()})
        run["cache_path_in_so"] |= caches.name.encode() in so or str(out).encode() in so
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{out.name}-{delegate.method}.so").write_bytes(so)
    if args.save:
        (args.save / f"{out.name}-caches.json").write_text(json.dumps(_listing(caches), indent=0))
    return run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--parallel", action="store_true")
    parser.add_argument("--same-path", action="store_true")
    parser.add_argument("--save", type=Path, help="keep each run's .so files and a listing of its caches here")
    parser.add_argument("--seeds", type=lambda text: text.split(","), default=None)
    parser.add_argument("--manifest", type=Path, default=HERE / "tiny_cuda.toml")
    parser.add_argument("--program", default="tiny_cuda_a")
    args = parser.parse_args(argv)
    args.manifest = args.manifest.resolve()
    if args.seeds:
        args.runs = len(args.seeds)
    if args.same_path and args.parallel:
        parser.error("--same-path runs one after the other")
    result: dict = {"manifest": str(args.manifest), "program": args.program, "parallel": args.parallel, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.parallel:
            started = [_start(Path(tmp), i, args) for i in range(args.runs)]
            result["runs"] = [_finish(s, args) for s in started]
        else:
            for i in range(args.runs):
                result["runs"].append(_finish(_start(Path(tmp), i, args), args))
                args.target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    for i, run in enumerate(result["runs"]):
        run["pythonhashseed"] = args.seeds[i] if args.seeds else "random"
    ok = [r for r in result["runs"] if "so_sections" in r]
    if len(ok) > 1:
        names = sorted(set().union(*(r["so_sections"] for r in ok)))
        result["differing_sections"] = {
            n: [r["so_sections"].get(n) for r in ok] for n in names if len({r["so_sections"].get(n) for r in ok}) > 1
        }
        result["byte_identical"] = all(r["files"] == ok[0]["files"] for r in ok)
    result["seconds"] = [round(r["seconds"], 1) for r in result["runs"]]
    args.target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    for r in result["runs"]:
        print(r.get("rc"), r.get("stderr", "")[-1500:])
    return 0 if len(ok) == len(result["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
