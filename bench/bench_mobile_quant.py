"""Benchmark (not a test): cold builds of the robot policy's OpenVINO and XNNPACK 4-bit programs
against hand-written export scripts of the same programs, side by side.

Run: ``.venv/bin/python bench/bench_mobile_quant.py [--runs N]`` (needs ``ptebuild[openvino]``).
Everything is written to a fresh temporary folder, deleted at the end; nothing goes into the
repository. The programs (``manifests/models/robot_policy.py``, both methods):

* ``policy_openvino``: OpenVINO on the CPU, at a fixed batch of 1 (OpenVINO programs take fixed
  shapes in ExecuTorch 1.5.1);
* ``policy_xnnpack_8da4w``: XNNPACK, ``quantize = "8da4w"``, ``group_size = 32``,
  ``skip_ungroupable = true`` (the 14-feature state projection stays float), batch 1 to 8.

Each run of each column starts from nothing cached:

* script: ``python -c SCRIPT``, a hand-written export (what a team writes without ptebuild):
  import, build the model with its seed, (quantize,) export both methods, lower, write the
  ``.pte``, run each method once in ExecuTorch's runtime at the example size against eager;
* ptebuild local: ``ptebuild build --only PROGRAM --executor local`` with an empty cache: a fresh
  worker interpreter, as the script, plus what ptebuild adds (manifest checks, keys, the check at
  every dynamic size, the cache, the record). Each empty cache is given the machine's probe of
  what it can lower and check (``capabilities/``, from the untimed first build), as a developer's
  cache keeps it: a first build on a new machine probes each backend once more (printed);
* ptebuild warm: the same with the default executor, a warm worker server that already imported
  torch and executorch (started by an untimed build first), still an empty cache.

Printed: the median seconds of N runs of each, and ptebuild / script. Takes about
``N x 6`` lowerings of the robot policy (some 10 minutes for N = 2 on 2 cores).
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
BIN = ROOT / ".venv" / "bin"
PYTHON = BIN / "python" if (BIN / "python").exists() else Path(sys.executable)
PTEBUILD = BIN / "ptebuild" if (BIN / "ptebuild").exists() else Path(sys.executable).with_name("ptebuild")

POLICY = 'kwargs = { image_size = 96, state_dim = 14, action_dim = 7, chunk = 16, width = 256 }\nseed = 20261129'
MANIFEST = f"""
[defaults]
out = "out"

[models.policy]
factory = "models.robot_policy:make_policy"
{POLICY}
dims = {{ batch = {{ min = 1, max = 8 }} }}

[models.policy.methods.encode_observation]
inputs = [{{ name = "image", shape = ["batch", 3, 96, 96] }}, {{ name = "state", shape = ["batch", 14] }}]

[models.policy.methods.predict_actions]
inputs = [{{ name = "observation", shape = ["batch", 37, 256] }}]

[models.policy_edge]
factory = "models.robot_policy:make_policy"
{POLICY}

[models.policy_edge.methods.encode_observation]
inputs = [{{ name = "image", shape = [1, 3, 96, 96] }}, {{ name = "state", shape = [1, 14] }}]

[models.policy_edge.methods.predict_actions]
inputs = [{{ name = "observation", shape = [1, 37, 256] }}]

[programs.policy_openvino]
model = "policy_edge"
backend = "openvino"
compile_specs = {{ device = "CPU" }}

[programs.policy_xnnpack_8da4w]
model = "policy"
backend = "xnnpack"
options = {{ quantize = "8da4w", group_size = 32, skip_ungroupable = true }}
"""

# The hand-written scripts: what ExecuTorch's documentation and examples show, for these programs.
SCRIPT_COMMON = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from executorch.exir import to_edge_transform_and_lower
from executorch.runtime import Runtime
from models.robot_policy import make_policy
torch.manual_seed(20261129)
model = make_policy(image_size=96, state_dim=14, action_dim=7, chunk=16, width=256).eval()

class Method(torch.nn.Module):
    def __init__(self, model, name):
        super().__init__(); self.model, self.name = model, name
    def forward(self, *args):
        return getattr(self.model, self.name)(*args)

def write_and_run(exported, partitioner, eager, examples, path):
    program = to_edge_transform_and_lower(exported, partitioner=[partitioner]).to_executorch()
    with open(path, "wb") as f:
        program.write_to_file(f)
    loaded = Runtime.get().load_program(path)
    for name, inputs in examples.items():
        got = loaded.load_method(name).execute(list(inputs))[0]
        with torch.no_grad():
            want = getattr(eager, name)(*inputs)
        print(name, float((got - want).abs().max()))
"""
SCRIPT_OPENVINO = SCRIPT_COMMON + """
from executorch.backends.openvino import OpenvinoPartitioner
from executorch.exir.backend.compile_spec_schema import CompileSpec
examples = {"encode_observation": (torch.randn(1, 3, 96, 96), torch.randn(1, 14)),
            "predict_actions": (torch.randn(1, 37, 256),)}
exported = {name: torch.export.export(Method(model, name), inputs, strict=False) for name, inputs in examples.items()}
write_and_run(exported, OpenvinoPartitioner([CompileSpec("device", b"CPU")]), model, examples, sys.argv[2])
"""
SCRIPT_8DA4W = SCRIPT_COMMON + """
import copy
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
from torchao.quantization.granularity import PerGroup
quantized = copy.deepcopy(model)
quantize_(quantized, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
          filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and m.in_features % 32 == 0)
batch = torch.export.Dim("batch", min=1, max=8)
examples = {"encode_observation": (torch.randn(2, 3, 96, 96), torch.randn(2, 14)),
            "predict_actions": (torch.randn(2, 37, 256),)}
shapes = {"encode_observation": (({0: batch}, {0: batch}),), "predict_actions": (({0: batch},),)}
exported = {name: torch.export.export(Method(quantized, name), inputs, dynamic_shapes=shapes[name], strict=False)
            for name, inputs in examples.items()}
write_and_run(exported, XnnpackPartitioner(), quantized, examples, sys.argv[2])
"""
SCRIPTS = {"policy_openvino": SCRIPT_OPENVINO, "policy_xnnpack_8da4w": SCRIPT_8DA4W}


def timed(command: list, env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench: {' '.join(map(str, command))[:200]} exited {done.returncode}:\n{done.stderr.strip()[-2000:]}")
    return seconds, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="cold builds of each column")
    parser.add_argument("--only", choices=sorted(SCRIPTS), action="append", help="these programs only")
    args = parser.parse_args()
    names = args.only or list(SCRIPTS)
    with tempfile.TemporaryDirectory(prefix="ptebuild-bench-mobile-") as tmp:
        tmp = Path(tmp)
        shutil.copytree(ROOT / "manifests" / "models", tmp / "models", ignore=shutil.ignore_patterns("__pycache__"))
        manifest = tmp / "edge.toml"
        manifest.write_text(MANIFEST)
        workers = {"PTEBUILD_WORKERS_DIR": str(tmp / "workers")}  # this bench's own warm server
        counter = iter(range(10**6))

        probed = tmp / "probed"  # the untimed first builds' cache: its capabilities/ is the probe

        def ptebuild(name: str, *extra: str, first: bool = False) -> float:
            run = next(counter)
            cache = probed if first else tmp / f"cache{run}"
            if not first and (probed / "capabilities").is_dir():
                shutil.copytree(probed / "capabilities", cache / "capabilities")
            seconds, done = timed([PTEBUILD, "build", manifest, "--only", name, "--cache", cache,
                                   "--out", tmp / f"out{run}", "--json", *extra], env=workers)
            program = json.loads(done.stdout)["targets"][0]
            if program["status"] != "built":
                sys.exit(f"bench: {name} was {program['status']}, not built")
            return seconds

        print(f"ptebuild {PTEBUILD}, {os.cpu_count()} cores, {args.runs} runs", flush=True)
        first = {}
        for name in names:  # starts the warm server, probes the backends (untimed)
            first[name] = ptebuild(name, first=True)
        print("first builds (warm server start and the backends' probe included): "
              + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in first.items()), flush=True)
        rows = []
        for name in names:
            script, local, warm = [], [], []
            for i in range(args.runs):
                seconds, done = timed([PYTHON, "-c", SCRIPTS[name], tmp, tmp / f"script-{name}-{i}.pte"])
                script.append(seconds)
                local.append(ptebuild(name, "--executor", "local"))
                warm.append(ptebuild(name))
                print(f"{name} run {i + 1}: script {script[-1]:.1f} s, ptebuild local {local[-1]:.1f} s, "
                      f"warm {warm[-1]:.1f} s; script's errors: {' '.join(done.stdout.split())}", flush=True)
            rows.append((name, statistics.median(script), statistics.median(local), statistics.median(warm)))
        subprocess.run([str(PTEBUILD), "workers", "stop"], env={**os.environ, **workers}, capture_output=True)
    print()
    print(f"{'program':22s}  {'script':>8s}  {'ptebuild local':>14s}  {'ratio':>6s}  {'ptebuild warm':>13s}  {'ratio':>6s}")
    for name, script_s, local_s, warm_s in rows:
        print(f"{name:22s}  {script_s:7.1f}s  {local_s:13.1f}s  {local_s / script_s:5.2f}x  {warm_s:12.1f}s  {warm_s / script_s:5.2f}x")
    print(f"(medians of {args.runs} cold runs each; ratio = ptebuild / script)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
