#!/bin/bash
# On the GPU machine: lower PROGRAM of MANIFEST (default: tiny_cuda_windows of
# tests/cuda/tiny_cuda_windows.toml), a CUDA program for Windows cross-compiled with MinGW-w64,
# through `ptebuild build`, and keep what comes out in $OUT.
# Needs, in the git-ignored .wintools/ (carried to the machine beside .whl/):
#   mingw.tar.xz   Debian bookworm's g++-mingw-w64-x86-64-posix and its dependencies, unpacked
#                  (dpkg -x), without lto1, cc1, Ada/Fortran, docs, gcc plugin headers and a
#                  few unused Windows import libraries; hostlib/ holds cc1plus's libisl, libmpc,
#                  libmpfr, libgmp for a machine that lacks them (about 26 MB);
#   nvidia_cuda_runtime-13.0.96-py3-none-win_amd64.whl   the Windows CUDA runtime (from PyPI).
# If the CLI build fails, the program is lowered directly (no check) so its files still come back;
# if it passes, a second cold build says whether the bytes repeat (TWICE=0 skips it).
set -u
MANIFEST=${1:-tests/cuda/tiny_cuda_windows.toml}
PROGRAM=${2:-tiny_cuda_windows}
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >"$OUT/install.log" 2>&1 || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/mingw && tar xJf .wintools/mingw.tar.xz -C /tmp/mingw
for tool in g++ gcc c++ cpp; do ln -sf "x86_64-w64-mingw32-$tool-posix" "/tmp/mingw/usr/bin/x86_64-w64-mingw32-$tool"; done
export PATH=/tmp/mingw/usr/bin:$PATH
if ldd /tmp/mingw/usr/lib/gcc/x86_64-w64-mingw32/12-posix/cc1plus | grep -q "not found"; then
  export LD_LIBRARY_PATH=/tmp/mingw/hostlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
python3 -c "import zipfile, sys; zipfile.ZipFile(sys.argv[1]).extractall('/tmp/wincuda')" .wintools/nvidia_cuda_runtime-*win_amd64.whl
export WINDOWS_CUDA_HOME=/tmp/wincuda/nvidia/cu13
{ x86_64-w64-mingw32-g++ -v 2>&1 | tail -n 1; ldd /tmp/mingw/usr/lib/gcc/x86_64-w64-mingw32/12-posix/cc1plus | grep -c "not found"
  python3 -c "from ptebuild.backends.cuda.toolchain import windows_toolchain_problem as p; print('toolchain problem:', p())"; } >"$OUT/toolchain.txt" 2>&1
cat "$OUT/toolchain.txt"
/usr/bin/time -f "cli build %e s" timeout ${BUILD_TIMEOUT:-300} python3 -m ptebuild build $MANIFEST \
  --out /tmp/winout --no-cache --json --jobs 1 --no-daemon >"$OUT/build.json" 2>"$OUT/build.err"
echo "cli build rc=$?"; tail -n 5 "$OUT/build.err"
if [ ! -f /tmp/winout/$PROGRAM.pte ]; then
  MANIFEST=$MANIFEST PROGRAM=$PROGRAM timeout ${BUILD_TIMEOUT:-300} python3 - <<'PY' >"$OUT/direct.log" 2>&1
import os, sys, shutil, traceback
from pathlib import Path
sys.path.insert(0, "tests/cuda")
os.environ["PTEBUILD_SHIM_LIBRARY_DIR"] = "/tmp/winout"
from ptebuild.lowering.examples import make_inputs
from ptebuild.models.factory.lower import lower
from ptebuild.models.factory.loading import build_model
from ptebuild.manifest import load_manifest
plan = load_manifest(os.environ["MANIFEST"])
program = next(p for p in plan.programs if p.name == os.environ["PROGRAM"])
model = build_model(program, Path(plan.manifest_dir), plan.manifest)
inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
lowered = lower(model, program, inputs, Path("/tmp/winout/direct"), print)
for name, path in lowered.files.items():
    shutil.copy(path, Path("/tmp/winout") / name)
print("direct lowering wrote", sorted(lowered.files))
PY
  echo "direct lowering rc=$?"; tail -n 30 "$OUT/direct.log"
fi
if [ -f /tmp/winout/$PROGRAM.pte ] && [ "${TWICE:-1}" = 1 ]; then
  # A second cold build (Inductor's and Triton's caches emptied, same paths): the same bytes?
  rm -rf /tmp/torchinductor_root ~/.triton/cache "${TRITON_CACHE_DIR:-/nonexistent}"
  timeout ${BUILD_TIMEOUT:-300} python3 -m ptebuild build $MANIFEST \
    --out /tmp/winout2 --no-cache --json --jobs 1 --no-daemon >"$OUT/build2.json" 2>>"$OUT/build.err"
  echo "second cli build rc=$?"
  (cd /tmp && sha256sum winout/*.pte winout/*.ptd winout2/*.pte winout2/*.ptd) | tee "$OUT/sha256.txt"
  cmp -s /tmp/winout/$PROGRAM.pte /tmp/winout2/$PROGRAM.pte || cp /tmp/winout2/$PROGRAM.pte "$OUT/second.pte"
fi
python3 -m ptebuild verify /tmp/winout --bytes >>"$OUT/build.err" 2>&1; echo "verify rc=$?"
cp /tmp/winout/*.pte /tmp/winout/*.ptd "$OUT/" 2>/dev/null
ls -la "$OUT"
