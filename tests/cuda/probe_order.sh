#!/bin/bash
# On the GPU machine: two cold tiny lowerings at one path, with the default compile pool and with
# TORCHINDUCTOR_COMPILE_THREADS=1 (at once, in two folders); keeps the .so files and cache listings.
set -u
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
timeout 250 python3 tests/cuda/repro_probe.py "$OUT/pool.json" --same-path --seeds 0,0 --save "$OUT/pool" >"$OUT/pool.log" 2>&1 &
pool=$!
TORCHINDUCTOR_COMPILE_THREADS=1 timeout 250 python3 tests/cuda/repro_probe.py "$OUT/serial.json" --same-path --seeds 0,0 --save "$OUT/serial" >"$OUT/serial.log" 2>&1
echo "serial rc=$?"; wait $pool; echo "pool rc=$?"
tail -n 25 "$OUT/pool.log" "$OUT/serial.log"
