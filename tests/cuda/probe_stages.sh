#!/bin/bash
# On the GPU machine: two cold lowerings of PROGRAM of MANIFEST (default: tiny_cuda_a of
# tests/cuda/tiny_cuda.toml) with Inductor's and Triton's caches at one path (emptied before
# each) and one PYTHONHASHSEED ($SEED, default 0); then tests/cuda/compare_stages.py says which
# compiler stage (kernel source, ttir, ttgir, llir, ptx, cubin, wrapper.cpp) first differs, with
# the diff ($OUT/stages-TAG.txt, the differing files in $OUT/stage-diffs-TAG.tgz); the outputs'
# digests and which ELF sections of each method's .so differ go to $OUT/outputs-TAG.txt.
# THREADS1=1 also runs a second pair, at the same time, with TORCHINDUCTOR_COMPILE_THREADS=1
# (kernels compiled one after another), under its own cache path.
#   bash tests/cuda/probe_stages.sh [MANIFEST PROGRAM]
# This is how the cubins' line-table mtime was found.
set -u
MANIFEST=${1:-tests/cuda/tiny_cuda.toml}
PROGRAM=${2:-tiny_cuda_a}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=${SEED:-0}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
pair() {  # pair TAG [VAR=VALUE...]: two cold runs, caches kept in /tmp/keep/TAG/run<i>
  local tag=$1; shift
  for i in 0 1; do
    rm -rf /tmp/same-$tag
    env "$@" TORCHINDUCTOR_CACHE_DIR=/tmp/same-$tag/inductor TRITON_CACHE_DIR=/tmp/same-$tag/triton \
      timeout ${RUN_TIMEOUT:-200} python3 -c "
import sys, time; sys.path.insert(0, 'tests/cuda')
from gpu_build import build_direct
t = time.monotonic()
print(build_direct('$MANIFEST', '/tmp/out-$tag$i', only=['$PROGRAM'])['$PROGRAM']['files'], round(time.monotonic() - t, 1), 's')
" >"$OUT/$tag$i.log" 2>&1
    echo "$tag run $i rc=$? $(tail -n 1 "$OUT/$tag$i.log")" | tee -a "$OUT/outputs-$tag.txt"
    mkdir -p /tmp/keep/$tag; rm -rf /tmp/keep/$tag/run$i
    mv /tmp/same-$tag /tmp/keep/$tag/run$i
    find /tmp/keep/$tag/run$i \( -name '*.o' -o -name '*.gch' -o -name '*.h' \) -delete
  done
  (cd /tmp && sha256sum out-${tag}0/* out-${tag}1/*) >>"$OUT/outputs-$tag.txt"
  python3 - /tmp/out-${tag}0 /tmp/out-${tag}1 "$PROGRAM" >>"$OUT/outputs-$tag.txt" 2>&1 <<'PY'
import sys; sys.path.insert(0, "tests/cuda")
from repro_probe import sections
from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
runs = []
for folder in sys.argv[1:3]:
    pte = f"{folder}/{sys.argv[3]}.pte"
    runs.append({d.method + ":" + k: v for d in read_cuda_delegates(pte)
                 for k, v in sections(read_pte_named_data(pte, d.payload.so_blob_key)).items()})
for name in sorted(runs[0].keys() | runs[1].keys()):
    if runs[0].get(name) != runs[1].get(name):
        print("so section differs:", name, runs[0].get(name), runs[1].get(name))
PY
  python3 tests/cuda/compare_stages.py /tmp/keep/$tag/run0 /tmp/keep/$tag/run1 "$OUT/stages-$tag.txt" --keep /tmp/diffs-$tag
  [ -d /tmp/diffs-$tag ] && tar czf "$OUT/stage-diffs-$tag.tgz" -C /tmp diffs-$tag
}
pair seed$PYTHONHASHSEED >"$OUT/pair-seed.log" 2>&1 &
[ "${THREADS1:-0}" = 1 ] && pair threads1 TORCHINDUCTOR_COMPILE_THREADS=1 >"$OUT/pair-threads1.log" 2>&1 &
wait
cat "$OUT"/outputs-*.txt
(cd "$OUT" && tar czf logs.tgz *.log && rm -f *.log)  # at most 8 files come back
