#!/bin/bash
# On the GPU machine, from the repository root, with the wheels of cuda-notes.md in .whl/:
#   bash tests/cuda/run_on_gpu.sh [STEPS]     (STEPS: any of data,robot,bench,repro,pytest; default all)
# Installs the wheels into /tmp/site, then: test data (make_data.py), the robot policy built
# directly twice (check figures, byte identity), bench_cuda.py (CLI: cold, cached, clean), the
# GPU tests (pytest plugin autoload off: the wheels' hydra plugin needs another antlr4).
# Results go to $OUT (log.txt, bench.json, robot.json, repro.json, data.tar) or ./gpu-out.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
STEPS=${1:-data,robot,bench,repro,pytest}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
LOG=$OUT/log.txt
step() { echo "== $1 $(date -u +%T)" >>"$LOG"; }
step install
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
{ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  which nvcc g++; } >>"$LOG" 2>&1
case $STEPS in *data*)
  step data
  /usr/bin/time -f "make_data %e s" timeout 150 python3 tests/cuda/make_data.py "$OUT/data" >>"$LOG" 2>&1
  echo "make_data rc=$?" >>"$LOG"
  (cd "$OUT" && tar cf data.tar data && rm -rf data)
esac
case $STEPS in *robot*)
  step robot
  timeout 300 python3 - >>"$LOG" 2>&1 <<'PY'
import json, os, sys, time
sys.path.insert(0, "tests/cuda")
from gpu_build import build_direct
out = os.environ["OUT"]
runs = []
for i in range(2):
    t = time.monotonic()
    r = build_direct("manifests/robot_cuda.toml", f"/tmp/robot{i}")
    runs.append({"seconds": time.monotonic() - t, "programs": r})
    print("robot build", i, round(runs[-1]["seconds"], 1), "s", flush=True)
    json.dump({"runs": runs}, open(f"{out}/robot.json", "w"), indent=1)
same = runs[0]["programs"]["policy_cuda"]["files"] == runs[1]["programs"]["policy_cuda"]["files"]
json.dump({"runs": runs, "byte_identical": same}, open(f"{out}/robot.json", "w"), indent=1)
print("byte identical", same)
PY
  echo "robot rc=$?" >>"$LOG"
esac
case $STEPS in *bench*)
  step bench
  timeout 420 python3 bench/bench_cuda.py --json "$OUT/bench.json" >>"$LOG" 2>&1
  echo "bench rc=$?" >>"$LOG"
esac
case $STEPS in *repro*)
  step repro
  timeout 240 python3 tests/cuda/repro_probe.py "$OUT/repro.json" 3 >>"$LOG" 2>&1
  echo "repro rc=$?" >>"$LOG"
esac
case $STEPS in *pytest*)
  step pytest
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout 200 python3 -m pytest tests/cuda/test_cuda_gpu.py -q -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "pytest rc=$?" >>"$LOG"
esac
step end
