"""A real Windows CUDA program (built on the GPU machine, committed in data/windows/): the loader
pairs it with its own weights only, and its DLL needs only shims the shipped list declares."""

from __future__ import annotations

import lzma
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shims"))
from shim_tools import SHIPPED_DEF

from ptebuild.backends.cuda import windows as cuda_windows
from ptebuild.backends.cuda.delegates import read_cuda_delegates, read_pte_named_data
from ptebuild.errors import CheckError, LoadError
from ptebuild.runtime import check
from ptebuild.shims import load_shim_list
from ptebuild.shims.pe import MACHINE_AMD64, PeImage

DATA = Path(__file__).resolve().parent / "data"
WINDOWS = DATA / "windows"


@pytest.fixture(scope="module")
def pte(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("windows") / "tiny_cuda_windows.pte"
    path.write_bytes(lzma.decompress((WINDOWS / "tiny_cuda_windows.pte.xz").read_bytes()))
    return path


@pytest.fixture(scope="module")
def dll(pte) -> bytes:
    (delegate,) = read_cuda_delegates(pte)
    return read_pte_named_data(pte, delegate.payload.so_blob_key)


def test_pairs_with_its_own_weights_only(pte):
    checked = check(pte, [WINDOWS / "tiny_cuda_windows_weights.ptd"], verify_bytes=True)
    assert len(checked.pte.required_keys) == 3
    with pytest.raises(LoadError, match="needs key 'cuda_fqn_weight:cuda:"):
        check(pte, [DATA / "tiny_cuda_b_weights.ptd"])


def test_its_code_is_a_self_contained_windows_dll(dll):
    image = PeImage(dll, "forward")
    assert image.machine == MACHINE_AMD64 and image.is_dll
    assert sorted(image.imports()) == ["KERNEL32.dll", "aoti_cuda_shims.dll", "cudart64_13.dll", "msvcrt.dll"]


def test_the_shipped_shim_list_covers_what_the_dll_imports(dll):
    shims = load_shim_list(SHIPPED_DEF)
    imports = cuda_windows.check_dll(dll, "forward", {shims.dll: shims.names()}, shims.dll)
    assert imports["aoti_cuda_shims.dll"] == 23
    used = sorted(str(name) for name in PeImage(dll, "forward").imports()["aoti_cuda_shims.dll"])
    with pytest.raises(CheckError, match=f"imports {used[0]} from aoti_cuda_shims.dll, which does not export it"):
        cuda_windows.check_dll(dll, "forward", {shims.dll: shims.names() - {used[0]}}, shims.dll)


def test_the_build_summary_names_a_check_without_numbers():
    """The human summary shows error and cosine for numeric checks, the check's name otherwise."""
    from ptebuild.api.build import BuildReport
    from ptebuild.cli.build import summary
    from ptebuild.figures import read_figures
    from ptebuild.results import Status, TargetResult

    windows = TargetResult("tiny_cuda_windows", "program", "cuda", status=Status.BUILT, check=cuda_windows.CHECK_NAME,
                           figures=(read_figures({"method": "forward", "dll_bytes": 3404317, "imports": {"aoti_cuda_shims.dll": 23}}),))
    linux = TargetResult("tiny_cuda_a", "program", "cuda", status=Status.BUILT, check="aoti-runner-cuda",
                         figures=(read_figures({"method": "forward", "sizes": {}, "output": 0, "max_abs_error": 2e-7, "cosine": 1.0}),))
    lines = summary(BuildReport("m.toml", Path("out"), 1.0, [windows, linux]).to_json()).splitlines()
    assert "windows-imports" in lines[1] and "err 2.0e-07 cos 1.000000" in lines[2]
