"""Regenerate the committed CUDA test data (``tests/cuda/data/``) on a machine with a CUDA GPU.

    python tests/cuda/make_data.py [OUT_DIR]      # default: tests/cuda/data

Builds ``tests/cuda/tiny_cuda.toml`` (two programs of one tiny MLP with different seeds) with
ptebuild's CUDA backend, checks both on the GPU, and writes the files the CPU tests read:
``tiny_cuda_a.pte``, ``tiny_cuda_a_weights.ptd``, ``tiny_cuda_b_weights.ptd`` and, if the total
stays under 3 MB, ``tiny_cuda_b.pte``; plus ``MANIFEST.json`` (sha256, sizes, check figures,
toolchain).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_build import build_direct

LIMIT = 3 * 1024 * 1024
HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    target = Path(argv[0]) if argv else HERE / "data"
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        results = build_direct(HERE / "tiny_cuda.toml", Path(tmp))
        wanted = ["tiny_cuda_a.pte", "tiny_cuda_a_weights.ptd", "tiny_cuda_b_weights.ptd"]
        size = sum((Path(tmp) / name).stat().st_size for name in wanted)
        if size + (Path(tmp) / "tiny_cuda_b.pte").stat().st_size <= LIMIT:
            wanted.append("tiny_cuda_b.pte")
        for name in wanted:
            shutil.copyfile(Path(tmp) / name, target / name)
    import torch

    from ptebuild.backends import get_backend

    backend = get_backend("cuda")
    options = backend.options_model.model_validate({"max_autotune": False})
    (target / "MANIFEST.json").write_text(
        json.dumps(
            {
                "files": sorted(wanted),
                "programs": results,
                "torch": torch.__version__,
                "toolchain": backend.toolchain_facts(options),
                "gpu": torch.cuda.get_device_name(0),
            },
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    print(json.dumps({name: r["files"] for name, r in results.items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
