"""Benchmark (not a test): a cold build of ``manifests/robot.toml`` against the export script a
user would write for the same three programs.

Run (about 15 minutes on 2 cores; on a shared machine under the heavy lock)::

    flock /work/wt/heavy.lock .venv/bin/python bench/bench_cold.py [--runs 3]

Side by side, in turn, ``--runs`` times each (medians):

* **hand script**: one Python process that imports torch and executorch, builds the policy once,
  exports each of its two methods once (batch dynamic, 1..8) and lowers the three programs from
  those exports with ExecuTorch's API (portable; XNNPACK with its weights in a ``.ptd``; XNNPACK
  int8-dynamic: PT2E quantization calibrated on four random batches), writing each ``.pte`` and
  ``.ptd``. No cache, no check, no test cases.
* **ptebuild -j1 --executor local**: from an empty cache folder (so also with no capability
  verdict and no warm server), with the check against eager PyTorch in ExecuTorch's runtime and
  the XNNPACK programs' ``.bpte``, as the manifest asks;
* **ptebuild (default)**: the same, with the defaults of this machine (the warm worker server,
  started by the build from its empty cache, and as many jobs as cores).

Each ptebuild run's outputs are verified (``ptebuild verify --bytes``). Targets (issue 27):
``-j1 --executor local`` at most 0.9x the hand script; the default at most 0.75x.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_executors import stop_servers  # a build's warm servers, by their pid files (this folder is on sys.path)

ROOT = Path(__file__).resolve().parents[1]
PYTHON = ROOT / ".venv" / "bin" / "python"
if not PYTHON.exists():
    PYTHON = Path(sys.executable)

TARGETS = {"ptebuild -j1 --executor local": 0.9, "ptebuild (default)": 0.75}

HAND_SCRIPT = '''
import sys
import torch
from torch import nn

sys.path.insert(0, sys.argv[1])
out = sys.argv[2]
from models.robot_policy import make_policy
from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir.passes.external_constants_pass import delegate_external_constants_pass_unlifted
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

torch.manual_seed(20261129)
policy = make_policy(image_size=96, state_dim=14, action_dim=7, chunk=16, width=256).eval()
batch = torch.export.Dim("batch", min=1, max=8)


class Method(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.policy, self.name = policy, name

    def forward(self, *args):
        return getattr(self.policy, self.name)(*args)


def example(batch_size):
    return {
        "encode_observation": (torch.randn(batch_size, 3, 96, 96), torch.randn(batch_size, 14)),
        "predict_actions": (torch.randn(batch_size, 37, 256),),
    }


inputs = example(2)
shapes = {"encode_observation": ({0: batch}, {0: batch}), "predict_actions": ({0: batch},)}


def export(module, method):
    """An unlifted module again (its forward takes the inputs one by one)."""
    return torch.export.export(module, inputs[method], dynamic_shapes=shapes[method], strict=False)


# Once per method, for all three programs (the wrapper's forward takes *args: one entry for them).
exported = {m: torch.export.export(Method(m), inputs[m], dynamic_shapes=(shapes[m],), strict=False) for m in inputs}


def external(module, method, data_name):
    delegate_external_constants_pass_unlifted(module=module, gen_tag_fn=lambda _node: data_name)
    return export(module, method)


def write(name, methods, partitioner, data_name):
    edge = to_edge_transform_and_lower(methods, partitioner=partitioner, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    program = edge.to_executorch(ExecutorchBackendConfig(external_constants=lambda _node: data_name))
    with open(f"{out}/{name}.pte", "wb") as f:
        program.write_to_file(f)
    program.write_tensor_data_to_file(out)


write("policy_portable", exported, [], "policy_portable_weights")
write("policy_xnnpack", {m: external(ep.module(), m, "policy_xnnpack_weights") for m, ep in exported.items()},
      [XnnpackPartitioner()], "policy_xnnpack_weights")
calibration = [example(size) for size in (1, 2, 8, 8)]
quantized = {}
for m, ep in exported.items():
    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    prepared = prepare_pt2e(ep.module(), XNNPACKQuantizer().set_global(config))
    for batch_inputs in calibration:
        prepared(*batch_inputs[m])
    quantized[m] = external(export(convert_pt2e(prepared), m).module(), m, "policy_xnnpack_int8_weights")
write("policy_xnnpack_int8", quantized, [XnnpackPartitioner()], "policy_xnnpack_int8_weights")
'''


def run(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    manifest = ROOT / "manifests" / "robot.toml"
    env = {k: v for k, v in os.environ.items() if k not in ("PTEBUILD_WORKERS_DIR", "PTEBUILD_CAPABILITIES_DIR", "CI",
                                                            "PTEBUILD_EXECUTOR", "PTEBUILD_NO_DAEMON")}
    times: dict[str, list[float]] = {"hand script": [], **{name: [] for name in TARGETS}}
    print(f"{os.cpu_count()} cores, python {PYTHON}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-cold-") as tmp:
        tmp = Path(tmp)
        for i in range(args.runs):
            order = list(times) if i % 2 == 0 else list(reversed(times))
            for name in order:
                folder = tmp / f"{i}-{name.replace(' ', '_')}"
                out, cache = folder / "out", folder / "cache"
                out.mkdir(parents=True)
                if name == "hand script":
                    seconds = run([str(PYTHON), "-c", HAND_SCRIPT, str(manifest.parent), str(out)], env)
                else:
                    extra = ["-j1", "--executor", "local"] if "local" in name else []
                    try:
                        seconds = run([str(PYTHON), "-m", "ptebuild", "build", str(manifest), "--cache", str(cache),
                                       "--out", str(out), *extra], env)
                    finally:
                        stop_servers(cache)
                    run([str(PYTHON), "-m", "ptebuild", "verify", str(out), "--bytes"], env)
                times[name].append(seconds)
                print(f"run {i + 1}: {name}: {seconds:.1f} s", flush=True)
                shutil.rmtree(folder, ignore_errors=True)
    hand = statistics.median(times["hand script"])
    print()
    ok = True
    for name, runs in times.items():
        median = statistics.median(runs)
        note = ""
        if name in TARGETS:
            ratio = median / hand
            met = ratio <= TARGETS[name]
            ok &= met
            note = f"{ratio:.2f}x the hand script (target <= {TARGETS[name]}x: {'ok' if met else 'MISSED'})"
        print(f"{name:32s} median {median:6.1f} s  runs {', '.join(f'{r:.1f}' for r in runs)}  {note}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
