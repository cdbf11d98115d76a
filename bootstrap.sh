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
set -euo pipefail
cd "$(dirname "$0")"

extras=""
if [ "${1:-}" = "--test" ]; then
  extras="[test,ray,openvino,grpc,dev]"
  missing=""
  for tool in clang lld-link llvm-dlltool llvm-dlltool-19 llvm-readobj gcc git x86_64-w64-mingw32-g++; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
  done
  # nginx (WebDAV PUT) serves the remote-cache tests; /usr/sbin is not on every PATH.
  [ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
  command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
  if [ -n "$missing" ]; then
    echo "bootstrap: installing Debian packages for:$missing" >&2
    sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
      clang lld llvm llvm-19 gcc git nginx g++-mingw-w64-x86-64-posix chromium >/dev/null
  fi
fi

python=${PYTHON:-python3.11}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".$extras"
if [ -n "$extras" ] && ! .venv-buildgrid/bin/python -c 'import buildgrid' 2>/dev/null; then
  # Its own venv: BuildGrid's dependencies conflict with constraints.txt.
  echo "bootstrap: installing BuildGrid (the gRPC cache tests' server) in .venv-buildgrid" >&2
  "$python" -m venv .venv-buildgrid
  .venv-buildgrid/bin/python -m pip install --quiet --disable-pip-version-check -r constraints-buildgrid.txt
fi
echo "bootstrap: ready (.venv/bin/ptebuild)" >&2
