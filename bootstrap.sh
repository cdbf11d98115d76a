#!/usr/bin/env bash
# Set up ptebuild in ./.venv with the pinned toolchain (constraints.txt).
#   ./bootstrap.sh          the build tool
#   ./bootstrap.sh --test   also the test dependencies (with Ray, for the executor tests, and OpenVINO), ruff and mypy
#                           (the dev extra: the checks .ci/run runs first), and the Debian tools the tests use
#                           (clang, lld, llvm and llvm-19 for the import-library tests; gcc, git;
#                           nginx for the remote-cache tests; MinGW-w64 for the CUDA Windows link tests;
#                           chromium, the headless browser that opens `build --timings`' page);
#                           grpcio for the gRPC cache tier, and .venv-buildgrid/, the REAPI server of its
#                           tests (BuildGrid, in a venv of its own, pinned in constraints-buildgrid.txt)
#
# The installer is uv (pinned in constraints.txt: the uv on PATH, else one that this script installs
# into .venv/bootstrap/ from PyPI with the interpreter's pip), given pip's own package sources
# (tools/uv_sources.py: on this machine the CPU build of torch that lies on disk) and the same pins,
# so it installs what pip would. Where uv cannot be had, plain pip does it all, as it always did;
# PTEBUILD_INSTALLER=pip asks for pip, PTEBUILD_INSTALLER=uv for uv or a failure.
#
# Bytecode: pip compiles every module it installs (some 15,000 files, half a minute of a core); uv
# leaves it to the first import, which compiles only what is imported (a build imports a third of
# it) and caches it. Where PYTHONDONTWRITEBYTECODE is set (these machines and CI) nothing would be
# cached and every start would compile torch again: there, after uv, every installed module but the
# packages' own test suites is compiled here, on every core.
#
# The Debian packages (--test, where a tool is missing) and BuildGrid's venv are installed in the
# background while the main venv is: they wait on the network and dpkg, not on each other.
set -euo pipefail
cd "$(dirname "$0")"

test=false
case "${1:-}" in
  "") ;;
  --test) test=true ;;
  *) echo "bootstrap: unknown option '$1': use ./bootstrap.sh, or ./bootstrap.sh --test for the tests too" >&2; exit 2 ;;
esac
python=${PYTHON:-python3.11}
installer=${PTEBUILD_INSTALLER:-auto}
case "$installer" in
  auto|uv|pip) ;;
  *) echo "bootstrap: PTEBUILD_INSTALLER=$installer: use uv, pip, or leave it unset (uv where it can be had, else pip)" >&2; exit 2 ;;
esac
extras=""
$test && extras="[test,ray,openvino,grpc,dev]"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
steps=()
background() {  # STEP COMMAND...: run COMMAND in the background; its output is shown only if it fails
  local step=$1
  shift
  "$@" >"$logs/$step.log" 2>&1 &
  pids+=("$!")
  steps+=("$step")
}
wait_for_background() {
  local failed=0 i
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "bootstrap: ${steps[$i]} failed:" >&2
      tail -n 40 "$logs/${steps[$i]}.log" >&2
      failed=1
    fi
  done
  return "$failed"
}

debian_packages() {
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
    clang lld llvm llvm-19 gcc git nginx g++-mingw-w64-x86-64-posix chromium >/dev/null
}

if $test; then
  missing=""
  for tool in clang lld-link llvm-dlltool llvm-dlltool-19 llvm-readobj gcc git x86_64-w64-mingw32-g++; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
  done
  # nginx (WebDAV PUT) serves the remote-cache tests; /usr/sbin is not on every PATH.
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  if [ -n "$missing" ]; then
    echo "bootstrap: installing Debian packages for:$missing" >&2
    background debian-packages debian_packages
  fi
fi

find_uv() {  # prints the uv to use: ours from an earlier run, the one on PATH, else one installed now
  if [ -x .venv/bootstrap/bin/uv ]; then
    echo .venv/bootstrap/bin/uv
  elif command -v uv >/dev/null 2>&1; then
    command -v uv
  else
    "$python" -m pip install --quiet --disable-pip-version-check --target .venv/bootstrap \
      "$(grep -m1 '^uv==' constraints.txt)" >"$logs/uv.log" 2>&1 && [ -x .venv/bootstrap/bin/uv ] &&
      echo .venv/bootstrap/bin/uv
  fi
}

[ -x .venv/bin/python ] || "$python" -m venv --without-pip .venv
uv=""
sources=()
if [ "$installer" != pip ]; then
  if uv=$(find_uv) && listed=$("$python" tools/uv_sources.py 2>>"$logs/uv.log"); then
    mapfile -t sources <<<"$listed"
  else
    uv=""
    why=$(grep -v '^WARNING: ' "$logs/uv.log" 2>/dev/null | tail -n 1)
    if [ "$installer" = uv ]; then
      echo "bootstrap: PTEBUILD_INSTALLER=uv, but uv cannot be had: ${why:-see above}" >&2
      exit 1
    fi
    echo "bootstrap: uv cannot be had (${why:-no detail}): installing with pip" >&2
  fi
fi

uv_install() {  # PYTHON ARGS...: uv pip install ARGS into PYTHON's venv, from pip's sources
  local target=$1
  shift
  "$uv" pip install --quiet --python "$target" "${sources[@]}" "$@"
}
compile_bytecode() {  # VENV: where Python caches no bytecode itself, every installed module but the packages' test suites
  [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] || return 0
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  "$1/bin/python" -m compileall -qq -j0 -x '/tests?/' "$site" || true  # a few files of some packages are not Python 3
}
buildgrid_venv() {
  rm -rf .venv-buildgrid  # one that cannot import buildgrid: half-installed, a dangling link, a file
  if [ -n "$uv" ]; then
    "$python" -m venv --without-pip .venv-buildgrid
    uv_install .venv-buildgrid/bin/python -r constraints-buildgrid.txt
    compile_bytecode .venv-buildgrid
  else
    "$python" -m venv .venv-buildgrid
    .venv-buildgrid/bin/python -m pip install --quiet --disable-pip-version-check -r constraints-buildgrid.txt
  fi
}

if $test && ! .venv-buildgrid/bin/python -c 'import buildgrid' 2>/dev/null; then
  # Its own venv: BuildGrid's dependencies conflict with constraints.txt.
  echo "bootstrap: installing BuildGrid (the gRPC cache tests' server) in .venv-buildgrid" >&2
  background buildgrid buildgrid_venv
fi

if [ -n "$uv" ]; then
  uv_install .venv/bin/python -c constraints.txt -e ".$extras" pip
  compile_bytecode .venv
else
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip --default-pip >/dev/null
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".$extras"
fi
wait_for_background
echo "bootstrap: ready (.venv/bin/ptebuild, installed with ${uv:-pip})" >&2
