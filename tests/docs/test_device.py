"""docs/device.md's examples on a real build: the Python example verifies every test case of each
program with its .ptd (the page's own run, on the robot, is slow: this is its fast sibling on
the session's bundle project, which the release tests build anyway), and the C++ example compiles against the executorch wheel's headers and
libraries, passes a program's cases with its own .ptd and refuses another program's at load."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from doc_blocks import block_by_id, blocks
from helpers import unavailable

ROOT = Path(__file__).resolve().parents[2]

# The BundledProgram API the C++ example calls (executorch/devtools/bundled_program/bundled_program.h),
# declared here because the executorch wheel ships neither that header nor a library of its own.
BUNDLED_PROGRAM_API = """#pragma once
#include <cstddef>
#include <executorch/runtime/core/error.h>
#include <executorch/runtime/executor/method.h>
namespace executorch {
namespace bundled_program {
::executorch::runtime::Error get_program_data(void* file_data, size_t file_data_len, const void** out_program_data,
                                              size_t* out_program_data_len);
::executorch::runtime::Error load_bundled_input(::executorch::runtime::Method& method, const void* bundled_program,
                                                size_t testset_idx);
::executorch::runtime::Error verify_method_outputs(::executorch::runtime::Method& method, const void* bundled_program,
                                                   size_t testset_idx, double rtol, double atol);
}  // namespace bundled_program
}  // namespace executorch
"""


@pytest.fixture(scope="module")
def bundled(tmp_path_factory) -> Path:
    """The output folder of the session's bundle project (tests/release/release_build.py): test cases
    for tiny_inside (weights inside its .pte) and tiny_xnnpack (weights in its .ptd)."""
    from release_build import built_bundles

    return built_bundles(tmp_path_factory).parent / "out"


def _record(folder: Path) -> dict:
    import json

    return json.loads((folder / "ptebuild.json").read_text())["targets"]


def test_the_python_example_verifies_each_program_with_its_ptd(bundled, tmp_path):
    code = block_by_id("device-python").text
    assert code.count('folder = Path("out/robot")') == 1
    script = tmp_path / "verify.py"
    script.write_text(code.replace('folder = Path("out/robot")', f"folder = Path({str(bundled)!r})"))
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    atol = {name: target["bundled_io"]["atol"] for name, target in _record(bundled).items() if "bundled_io" in target}
    assert done.stdout.splitlines() == [f"{name}: ok (atol {atol[name]})" for name in ("tiny_inside", "tiny_xnnpack")]


def test_the_cpp_example_verifies_a_bpte_with_its_ptd(bundled, tmp_path):
    [block] = [b for b in blocks(ROOT / "docs" / "device.md") if b.language == "cpp"]
    compiler = shutil.which("g++") or shutil.which("clang++")
    if compiler is None:
        unavailable("no C++ compiler (g++ or clang++): the C++ example of docs/device.md cannot be compiled")
    spec = importlib.util.find_spec("executorch")
    assert spec is not None and spec.submodule_search_locations
    package = Path(next(iter(spec.submodule_search_locations)))
    extension = next((package / "extension" / "pybindings").glob("_C.*.so"))
    libdir = sysconfig.get_config_var("LIBDIR")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not libdir:
        unavailable("this Python has no shared libpython, which the wheel's Python extension (holding the "
                    "BundledProgram functions) needs when linked into a program")
    header = tmp_path / "include" / "executorch" / "devtools" / "bundled_program" / "bundled_program.h"
    header.parent.mkdir(parents=True)
    header.write_text(BUNDLED_PROGRAM_API)
    (tmp_path / "verify_bpte.cpp").write_text(block.text)
    lib = package / "lib"
    rpath = os.pathsep.join(map(str, (lib, extension.parent, libdir, package.parent / "torch" / "lib")))
    # What the wheel's executorch-config.cmake gives a consumer: its include folders, definitions and C++17.
    command = [compiler, "-std=c++17", "-O1", f"-I{tmp_path / 'include'}", f"-I{package / 'include'}",
               f"-I{package / 'include' / 'executorch' / 'runtime' / 'core' / 'portable_type' / 'c10'}",
               "-DC10_USING_CUSTOM_GENERATED_MACROS", "-DET_EVENT_TRACER_ENABLED", "verify_bpte.cpp", "-o", "verify_bpte",
               "-Wl,--no-as-needed", str(lib / "libexecutorch.so"), str(lib / "libexecutorch_kernels_optimized.so"),
               str(lib / "libexecutorch_backend_xnnpack.so"), str(extension), f"-L{libdir}",
               f"-lpython{sysconfig.get_config_var('LDVERSION')}", f"-Wl,-rpath,{rpath}"]
    built = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-4000:]

    run = [str(tmp_path / "verify_bpte"), str(bundled / "tiny_xnnpack.bpte")]
    atol = str(_record(bundled)["tiny_xnnpack"]["bundled_io"]["atol"])  # what the bundle says to verify with
    own = subprocess.run([*run, str(bundled / "tiny_xnnpack_weights.ptd"), atol, "forward", "score"],
                         capture_output=True, text=True, timeout=120)
    assert own.returncode == 0, own.stdout + own.stderr
    assert own.stdout.splitlines() == [f"{m}[{i}]: ok" for m in ("forward", "score") for i in range(3)]
    other = subprocess.run([*run, str(bundled / "tiny_portable_weights.ptd"), atol, "forward"],  # another program's
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 1 and "cannot load method forward" in other.stderr
