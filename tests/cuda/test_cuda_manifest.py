"""CUDA compile specs in manifests: validated before anything is imported, located, with a fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ptebuild.errors import ManifestError
from ptebuild.manifest import load_manifest

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "tests" / "manifests"
BAD = sorted([*MANIFESTS.glob("bad-compile-specs*.toml"), *MANIFESTS.glob("bad-*cuda*.toml")])


def test_there_are_bad_cuda_manifests():
    assert len(BAD) >= 10


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_compile_specs_message(path: Path, monkeypatch):
    monkeypatch.chdir(path.parent)
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ").format(file=path.name)
    with pytest.raises(ManifestError) as info:
        load_manifest(path.name)
    assert str(info.value) == expected


def test_robot_cuda_resolves():
    plan = load_manifest(REPO / "manifests" / "robot_cuda.toml")
    (program,) = plan.programs
    assert program.backend == "cuda"
    assert program.output_names == ("policy_cuda.pte", "policy_cuda_weights.ptd")
    assert program.options == {
        "platform": "linux",
        "shim_library": None,
        "low_memory_mode": False,
        "max_autotune": False,  # the default: byte-reproducible kernels
        "emulate_precision_casts": True,
        "triton_kernel_mode": True,
    }
    # compile_specs are merged into options, which the action key hashes: no second copy.
    assert "compile_specs" not in program.program_entry


def test_validation_imports_no_torch():
    code = (
        "import sys; from ptebuild.manifest import load_manifest; "
        f"load_manifest({str(REPO / 'manifests' / 'robot_cuda.toml')!r}); "
        "assert 'torch' not in sys.modules and 'executorch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_program_compile_specs_override_defaults(tmp_path: Path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        (REPO / "tests" / "cuda" / "tiny_cuda.toml").read_text().replace(
            "[defaults]\n", "[defaults]\ncompile_specs.cuda = { max_autotune = false, low_memory_mode = true }\n"
        ).replace('data_name = "tiny_cuda_b_weights"', 'data_name = "tiny_cuda_b_weights"\ncompile_specs = { max_autotune = true }')
    )
    (tmp_path / "cudamodels").symlink_to(REPO / "tests" / "cuda" / "cudamodels")
    a, b = load_manifest(manifest).programs
    assert (a.options["max_autotune"], a.options["low_memory_mode"]) == (False, True)
    assert (b.options["max_autotune"], b.options["low_memory_mode"]) == (True, True)


def test_xnnpack_takes_its_options_as_compile_specs(tmp_path: Path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        (MANIFESTS / "tiny.toml").read_text().replace(
            'data_name = "tiny_xnnpack_weights"', 'data_name = "tiny_xnnpack_weights"\ncompile_specs = { per_op_mode = true }'
        )
    )
    (tmp_path / "tinymodels").symlink_to(MANIFESTS / "tinymodels")
    programs = {p.name: p for p in load_manifest(manifest).programs}
    assert programs["tiny_xnnpack"].options["per_op_mode"] is True


def test_windows_with_its_shim_target_resolves(tmp_path: Path):
    manifest = tmp_path / "m.toml"
    text = (MANIFESTS / "bad-cuda-shim-unknown.toml").read_text().split("\n", 1)[1]
    manifest.write_text(text.replace('"aoti_cuda_shim" }', '"aoti_cuda_shims" }').replace("../../ptebuild", str(REPO / "ptebuild")))
    (tmp_path / "tinymodels").symlink_to(MANIFESTS / "tinymodels")
    plan = load_manifest(manifest)
    assert plan.programs[0].options["platform"] == "windows"
    assert plan.programs[0].options["shim_library"] == "aoti_cuda_shims"
