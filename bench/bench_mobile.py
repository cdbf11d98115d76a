"""Benchmark (not a test): cold builds of the robot policy for Core ML and Vulkan, beside hand-written exports.

Run: ``python bench/bench_mobile.py [--repeats N] [--only coreml|vulkan] [--json FILE]``.

For each backend, the program of ``manifests/robot_mobile.toml`` (``policy_ios_coreml``,
``policy_android_vulkan``) is built from nothing, in a fresh process, two ways, side by side
(interleaved, so that the machine's load falls on both alike):

* ptebuild: ``python -m ptebuild build manifests/robot_mobile.toml --only PROGRAM --no-cache
  --no-daemon --jobs 1 --out DIR`` (worker processes that import torch and executorch anew: cold;
  the build checks the program structurally and writes the build record);
* hand-written: ``python SCRIPT`` with plain ExecuTorch calls and no ptebuild (the script below:
  the factory under the seed, ``torch.export`` of both methods with the dynamic batch,
  ``to_edge_transform_and_lower`` with the backend's partitioner and the same compile specs,
  ``to_executorch``, the files written; no check).

One ptebuild build runs first, untimed (it leaves the capability probe's verdict in a folder
that every timed build then reads). Printed: each run's seconds, the medians, ptebuild's median
over the hand-written one, and whether each way gave the same bytes every time (the hand-written
Core ML export does not: its payload carries a random identifier). The machine is shared and
noisy: compare the ratio, not the seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "manifests" / "robot_mobile.toml"
PROGRAMS = {"coreml": "policy_ios_coreml", "vulkan": "policy_android_vulkan"}

HAND_WRITTEN = '''\
"""The robot policy exported by hand for BACKEND, with ExecuTorch alone (bench/bench_mobile.py)."""
import sys
import warnings

warnings.filterwarnings("ignore")
import logging

logging.disable(logging.WARNING)
sys.path.insert(0, sys.argv[2])  # the manifest's folder: models.robot_policy
import torch
from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

from models.robot_policy import make_policy

backend, out = sys.argv[1], sys.argv[3]
torch.manual_seed(20261129)
policy = make_policy(image_size=96, state_dim=14, action_dim=7, chunk=16, width=256).eval()


class Method(torch.nn.Module):
    def __init__(self, name):
        super().__init__()
        self.policy, self.name = policy, name

    def forward(self, *args):
        return getattr(self.policy, self.name)(*args)


batch = torch.export.Dim("batch", min=1, max=8)
exported = {
    "encode_observation": torch.export.export(
        Method("encode_observation"), (torch.randn(2, 3, 96, 96), torch.randn(2, 14)),
        dynamic_shapes=(({0: batch}, {0: batch}),), strict=False),
    "predict_actions": torch.export.export(
        Method("predict_actions"), (torch.randn(2, 37, 256),), dynamic_shapes=(({0: batch},),), strict=False),
}
if backend == "coreml":
    import coremltools as ct
    from executorch.backends.apple.coreml.compiler import CoreMLBackend
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    specs = CoreMLBackend.generate_compile_specs(
        compute_unit=ct.ComputeUnit.ALL, minimum_deployment_target=ct.target.iOS17, compute_precision=ct.precision.FLOAT16)
    partitioner = CoreMLPartitioner(compile_specs=specs)
    config = None
else:
    from executorch.backends.vulkan import VulkanPartitioner
    from executorch.exir import ExecutorchBackendConfig

    partitioner = VulkanPartitioner({"external_constants_max_data_bytes": (1 << 63) - 1})
    config = ExecutorchBackendConfig(external_constants=lambda node: "policy_android_vulkan_weights")
edge = to_edge_transform_and_lower(exported, partitioner=[partitioner], compile_config=EdgeCompileConfig(_check_ir_validity=False))
program = edge.to_executorch(config) if config else edge.to_executorch()
with open(f"{out}/program.pte", "wb") as f:
    program.write_to_file(f)
program.write_tensor_data_to_file(out)
'''


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.suffix in (".pte", ".ptd")}


def _run(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=sorted(PROGRAMS), action="append")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench-mobile-") as tmp:
        tmp_path = Path(tmp)
        script = tmp_path / "hand_written_export.py"
        script.write_text(HAND_WRITTEN)
        env = {**os.environ, "PYTHONWARNINGS": "ignore", "PTEBUILD_CAPABILITIES_DIR": str(tmp_path / "capabilities"),
               "PTEBUILD_CACHE": str(tmp_path / "unused-cache")}

        def ptebuild(program: str, out: Path) -> float:
            return _run([sys.executable, "-m", "ptebuild", "build", str(MANIFEST), "--only", program, "--no-cache",
                         "--no-daemon", "--jobs", "1", "--out", str(out), "--json"], env)

        for backend in args.only or sorted(PROGRAMS):
            program = PROGRAMS[backend]
            ptebuild(program, tmp_path / f"{backend}-warm-up")  # the capability probe, untimed
            runs: dict[str, list[float]] = {"ptebuild": [], "hand-written": []}
            digests: dict[str, list[dict[str, str]]] = {"ptebuild": [], "hand-written": []}
            for i in range(args.repeats):
                out = tmp_path / f"{backend}-ptebuild-{i}"
                runs["ptebuild"].append(ptebuild(program, out))
                digests["ptebuild"].append(_digests(out))
                out = tmp_path / f"{backend}-hand-{i}"
                out.mkdir()
                runs["hand-written"].append(_run([sys.executable, str(script), backend, str(MANIFEST.parent), str(out)], env))
                digests["hand-written"].append(_digests(out))
                print(f"{backend} run {i}: ptebuild {runs['ptebuild'][-1]:6.1f} s, hand-written {runs['hand-written'][-1]:6.1f} s", flush=True)
            medians = {way: statistics.median(seconds) for way, seconds in runs.items()}
            same = {way: all(d == found[0] for d in found) for way, found in digests.items()}
            figures[backend] = {"program": program, "seconds": runs, "median_seconds": medians,
                                "ratio": medians["ptebuild"] / medians["hand-written"], "same_bytes_every_run": same,
                                "ptebuild_sha256": digests["ptebuild"][0]}
            print(f"{backend}: median ptebuild {medians['ptebuild']:.1f} s, hand-written {medians['hand-written']:.1f} s, "
                  f"ratio {figures[backend]['ratio']:.2f}; same bytes every run: ptebuild {same['ptebuild']}, "
                  f"hand-written {same['hand-written']}", flush=True)
            if args.json:
                args.json.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
