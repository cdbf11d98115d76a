#!/bin/bash
# Here (not on the GPU machine), from the repository root: download into .whl/ the wheels that
# the GPU machine's image lacks (../shared/docs/cuda-notes.md), at constraints.txt's versions,
# for its Python 3.12; .whl/ is git-excluded and travels with `carry`.
#   bash tests/cuda/fetch_wheels.sh
set -eu
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
pin() { grep -i -m1 "^$1==" constraints.txt; }
NAMES="executorch torchao pytorch_tokenizers expecttest kgb parameterized ruamel.yaml hydra-core omegaconf
  pydantic pydantic_core annotated-types typing-inspection tomli_w pyelftools filelock xxhash safetensors
  tokenizers sentencepiece tiktoken regex"
PY=.venv/bin/python; [ -x $PY ] || PY=python3
for name in $NAMES; do
  spec=$(pin "$name") || { echo "fetch_wheels: $name is not in constraints.txt" >&2; exit 1; }
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$spec"
done
# antlr4-python3-runtime 4.9.3 (what omegaconf and hydra load) has no wheel: build one.
[ -n "$(ls .whl/antlr4_python3_runtime-* 2>/dev/null)" ] || $PY -m pip wheel -q --no-deps -w .whl "$(pin antlr4-python3-runtime)"
du -sh .whl
