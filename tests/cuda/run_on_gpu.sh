#!/bin/bash
# On the GPU machine, from the repository root, with the wheels of cuda-notes.md in .whl/:
#   bash tests/cuda/run_on_gpu.sh [STEPS]     (STEPS: any of data,repro,pytest,outputs,limits,checks,llm,doctor,bench; default all)
# Installs the wheels into /tmp/site, then: test data (make_data.py); repro_probe.py on the
# robot policy, two cold lowerings (check figures, byte identity, which ELF sections differ),
# beside the GPU tests (pytest plugin autoload off: the wheels' hydra plugin needs another
# antlr4: the wheels carry 4.9.3, the one omegaconf and hydra, and so ExecuTorch's LLM export, load); bench_cuda.py (CLI: cold, cached, clean, warm Inductor).
# Results go to $OUT (log.txt, bench.json, repro-*.json, data.tar) or ./gpu-out.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
STEPS=${1:-data,repro,pytest,outputs,limits,checks,llm,doctor,bench}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
LOG=$OUT/log.txt
step() { echo "== $1 $(date -u +%T)" >>"$LOG"; }
if [ -z "${SKIP_INSTALL:-}" ]; then  # SKIP_INSTALL=1: another run of this script installed them (steps run side by side)
  step install
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$LOG" 2>&1 || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
# pyproject's addopts without pytest-xdist's options: the wheels carry no xdist, and plugin
# autoload is off (see above), so `-n auto` would be an unknown argument.
ADDOPTS=$(python3 -c "import tomllib; o = tomllib.load(open('pyproject.toml', 'rb'))['tool']['pytest']['ini_options']['addopts']; print(o.replace('-n auto --dist loadfile', '').strip())")
{ nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
  which nvcc g++; } >>"$LOG" 2>&1
case $STEPS in *data*)
  step data
  /usr/bin/time -f "make_data %e s" timeout 150 python3 tests/cuda/make_data.py "$OUT/data" >>"$LOG" 2>&1
  echo "make_data rc=$?" >>"$LOG"
  (cd "$OUT" && tar cf data.tar data && rm -rf data)
esac
case $STEPS in *repro*)
  step repro
  # Two cold lowerings of the robot policy, one after the other, Inductor's and Triton's caches
  # emptied at one path before each (two machines of one kind), with two PYTHONHASHSEEDs. It
  # runs in the background, beside the GPU tests (the GPU and the cores have room for both).
  timeout ${REPRO_TIMEOUT:-300} python3 tests/cuda/repro_probe.py "$OUT/repro-robot.json" --same-path --seeds 0,12345 \
    --manifest manifests/robot_cuda.toml --program policy_cuda >"$OUT/repro-robot.log" 2>&1 &
  repro=$!
esac
case $STEPS in *pytest*)
  step pytest
  PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout ${PYTEST_TIMEOUT:-280} python3 -m pytest -o addopts="$ADDOPTS" tests/cuda/test_cuda_gpu.py -q -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "pytest rc=$?" >>"$LOG"
esac
case $STEPS in *outputs*)
  # Issue 18: CUDA programs as people write them (aliased, strided, nested, a scatter, a missing
  # kernel), each output slot the .pte declares checked; the C++/runtime failure lines.
  step outputs
  PTEBUILD_CAPABILITIES_DIR=$OUT/capabilities PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout ${OUTPUTS_TIMEOUT:-420} \
    python3 -m pytest -o addopts="$ADDOPTS" tests/cuda/test_cuda_outputs_gpu.py -q -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "outputs rc=$?" >>"$LOG"
esac
case $STEPS in *limits*)
  # Issue 26 item 4: a transposed convolution builds for CUDA (ptebuild lowers it as a convolution)
  # and matches eager on the GPU; float32 attention fails with the known limit's advice. -s prints
  # the build's JSON report (the check figures) into the log.
  step limits
  PTEBUILD_CAPABILITIES_DIR=$OUT/capabilities PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout ${LIMITS_TIMEOUT:-420} \
    python3 -m pytest -o addopts="$ADDOPTS" tests/cuda/test_cuda_conv_transpose.py -q -s -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "limits rc=$?" >>"$LOG"
esac
case $STEPS in *checks*)
  # Issue 26: half-precision programs built with the default tolerances, samples checked on the
  # GPU, a wrong CUDA program named wrong (figures in $OUT/checks-cuda.json).
  step checks
  OUT=$OUT PTEBUILD_CAPABILITIES_DIR=$OUT/capabilities PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout ${CHECKS_TIMEOUT:-420} \
    python3 -m pytest -o addopts="$ADDOPTS" tests/cuda/test_cuda_checks_gpu.py -q -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "checks rc=$?" >>"$LOG"
esac
case $STEPS in *llm*)
  # Issue 28 item 8: manifests/chat_cuda.toml (the tiny chat decoder in bfloat16, ExecuTorch's CUDA
  # attention) built from ExecuTorch's LLM export, checked on the GPU by the CUDA backend's check
  # and by generation (a seeded 16-token prefill, then 16 greedy decode steps through the program's
  # own KV cache, its compiled code run by AOTInductor's runner) against the eager model on the GPU.
  # Figures to $OUT/llm-cuda.json.
  step llm
  LLM_CUDA_OUT=$OUT PTEBUILD_CAPABILITIES_DIR=$OUT/capabilities PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 timeout ${LLM_TIMEOUT:-900} \
    python3 -m pytest -o addopts="$ADDOPTS" tests/cuda/test_llm_cuda_gpu.py -q -s -p no:cacheprovider -rs >>"$LOG" 2>&1
  echo "llm rc=$?" >>"$LOG"
esac
case $STEPS in *doctor*)
  # What this machine can lower and check (ExecuTorch's pip runtime under torch 2.11+cu130), then
  # the robot manifest: its CPU programs must fail in seconds, before lowering (or be restored).
  step doctor
  export PTEBUILD_CAPABILITIES_DIR=$OUT/capabilities
  timeout 300 python3 -m ptebuild doctor --cache "$OUT/doctor-cache" >>"$LOG" 2>&1; echo "doctor rc=$?" >>"$LOG"
  timeout 300 python3 -m ptebuild doctor --json --cache "$OUT/doctor-cache" >"$OUT/doctor.json" 2>>"$LOG"
  /usr/bin/time -f "robot build %e s" timeout 300 python3 -m ptebuild build manifests/robot.toml --keep-going \
    --no-daemon --cache "$OUT/doctor-cache" --out "$OUT/robot-out" >>"$LOG" 2>&1
  echo "robot build rc=$?" >>"$LOG"
  cp -r "$OUT/robot-out/.ptebuild/logs" "$OUT/robot-logs" 2>/dev/null
  unset PTEBUILD_CAPABILITIES_DIR
esac
case $STEPS in *repro*)
  wait $repro; echo "repro robot rc=$?" >>"$LOG"
  tail -n 40 "$OUT/repro-robot.log" >>"$LOG"
esac
case $STEPS in *bench*)
  step bench
  timeout ${BENCH_TIMEOUT:-420} python3 bench/bench_cuda.py --json "$OUT/bench.json" >>"$LOG" 2>&1
  echo "bench rc=$?" >>"$LOG"
esac
step end
