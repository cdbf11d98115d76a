#!/bin/bash
# On the GPU machine: two cold lowerings of tiny_cuda_a with Inductor's and Triton's caches at one
# path (emptied before each); each run's caches are kept as run<i>.tar in $OUT, to find the first
# compiler stage (ttir, ttgir, llir, ptx, cubin, fatbin) whose output differs.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
for i in 0 1; do
  rm -rf /tmp/same
  TORCHINDUCTOR_CACHE_DIR=/tmp/same/inductor TRITON_CACHE_DIR=/tmp/same/triton timeout 120 python3 -c "
import sys; sys.path.insert(0, 'tests/cuda')
from gpu_build import build_direct
print(build_direct('tests/cuda/tiny_cuda.toml', '/tmp/out$i', only=['tiny_cuda_a'])['tiny_cuda_a']['files'])
" >"$OUT/run$i.log" 2>&1
  echo "run $i rc=$?"; tail -n 1 "$OUT/run$i.log"
  tar cf "$OUT/run$i.tar" -C /tmp/same --exclude='*.o' --exclude='*.so' --exclude='*.gch' --exclude='*.h' triton inductor
done
ls -la "$OUT"
