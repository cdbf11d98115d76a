"""On the GPU machine: is a CUDA lowering byte-reproducible, and if not, which part differs?

    python tests/cuda/repro_probe.py OUT.json [RUNS [MANIFEST PROGRAM]]

Lowers PROGRAM (default ``tiny_cuda_a`` of ``tiny_cuda.toml``) RUNS times (default 3), each in a fresh process (the first with
Inductor's on-disk caches as the machine has them, normally cold), then compares the ``.pte``,
the ``.ptd`` and the compiled ``.so`` inside each ``.pte`` section by section (ELF).
"""

from __future__ import annotations

import hashlib
import json
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
print(json.dumps(build_direct({manifest!r}, {out!r}, only=[{program!r}])[{program!r}]["files"]))
"""


def sections(so: bytes) -> dict[str, str]:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(so))
    return {s.name: f"{s.data_size}:{hashlib.sha256(s.data()).hexdigest()[:16]}" for s in elf.iter_sections()}


def main(argv: list[str]) -> int:
    from ptebuild.runtime.cuda_payload import read_cuda_delegates, read_pte_named_data

    target = Path(argv[0])
    runs = int(argv[1]) if len(argv) > 1 else 3
    manifest = Path(argv[2]).resolve() if len(argv) > 2 else HERE / "tiny_cuda.toml"
    program = argv[3] if len(argv) > 3 else "tiny_cuda_a"
    result = {"runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            out = Path(tmp, f"run{i}")
            started = time.monotonic()
            done = subprocess.run(
                [sys.executable, "-c", BUILD.format(here=str(HERE), manifest=str(manifest), out=str(out), program=program)],
                capture_output=True, text=True,
            )
            run = {"seconds": time.monotonic() - started, "rc": done.returncode}
            if done.returncode:
                run["stderr"] = done.stderr[-3000:]
            else:
                run["files"] = json.loads(done.stdout.strip().splitlines()[-1])
                pte = out / f"{program}.pte"
                run["so_sections"] = {}
                for delegate in read_cuda_delegates(pte):
                    so = read_pte_named_data(pte, delegate.payload.so_blob_key)
                    run[f"so_key_{delegate.method}"] = delegate.payload.so_blob_key
                    run["so_sections"].update(
                        {f"{delegate.method}:{k}": v for k, v in sections(so).items()}
                    )
            result["runs"].append(run)
            target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    ok = [r for r in result["runs"] if "so_sections" in r]
    if len(ok) > 1:
        names = sorted(set().union(*(r["so_sections"] for r in ok)))
        result["differing_sections"] = {
            n: [r["so_sections"].get(n) for r in ok] for n in names if len({r["so_sections"].get(n) for r in ok}) > 1
        }
        for name in ok[0]["files"]:
            result[f"identical:{name}"] = [r["files"][name]["sha256"] for r in ok]
    target.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
