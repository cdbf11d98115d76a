#!/bin/bash
# On the GPU machine: two cold lowerings of PROGRAM of MANIFEST (default: tiny_cuda_a of
# tests/cuda/tiny_cuda.toml) with Inductor's and Triton's caches at one path (emptied before
# each); each run's caches are kept as run<i>.tar in $OUT (objects and headers left out), to find
# the first stage (kernel source, ttir, ttgir, llir, ptx, cubin, fatbin, wrapper.cpp) whose output
# differs: extract both, then `sha256sum` every file and diff the lists.
#   bash tests/cuda/probe_stages.sh [MANIFEST PROGRAM]
# This is how the cubins' line-table mtime was found (tests/cuda/repro_probe.py says which ELF
# sections of the .so differ; this says which compiler stage).
set -u
MANIFEST=${1:-tests/cuda/tiny_cuda.toml}
PROGRAM=${2:-tiny_cuda_a}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
for i in 0 1; do
  rm -rf /tmp/same
  TORCHINDUCTOR_CACHE_DIR=/tmp/same/inductor TRITON_CACHE_DIR=/tmp/same/triton timeout ${RUN_TIMEOUT:-200} python3 -c "
import sys; sys.path.insert(0, 'tests/cuda')
from gpu_build import build_direct
print(build_direct('$MANIFEST', '/tmp/out$i', only=['$PROGRAM'])['$PROGRAM']['files'])
" >"$OUT/run$i.log" 2>&1
  echo "run $i rc=$?"; tail -n 1 "$OUT/run$i.log"
  tar cf "$OUT/run$i.tar" -C /tmp/same --exclude='*.o' --exclude='*.so' --exclude='*.gch' --exclude='*.h' triton inductor
done
ls -la "$OUT"
