"""The PE reader: exports (code or data) and imports of real DLLs linked by clang and lld-link
against import libraries that ptebuild writes."""

from __future__ import annotations

import subprocess

import pytest
from shim_tools import require_tool

from ptebuild.errors import FormatError
from ptebuild.shims import Export, ShimList, write_import_library
from ptebuild.shims.pe import MACHINE_AMD64, PeImage

DLL_SOURCE = """
__declspec(dllimport) int aoti_torch_check(int);
__declspec(dllimport) int aoti_torch_warn(void);
__declspec(dllimport) int cudaMalloc(void **, unsigned long long);
__declspec(dllexport) int table[4] = {1, 2, 3, 4};
__declspec(dllexport) int run(int x) {
    void *p;
    return aoti_torch_check(x) + aoti_torch_warn() + cudaMalloc(&p, 16) + table[x & 3];
}
"""


@pytest.fixture(scope="module")
def linked_dll(tmp_path_factory):
    """A DLL that imports two shims and one CUDA runtime function, and exports code and data."""
    clang, lld_link = require_tool("clang"), require_tool("lld-link")
    folder = tmp_path_factory.mktemp("pe")
    (folder / "dll.c").write_text(DLL_SOURCE)
    (folder / "aoti_cuda_shims.lib").write_bytes(write_import_library(
        ShimList("aoti_cuda_shims.dll", (Export("aoti_torch_check"), Export("aoti_torch_warn"), Export("unused")))
    ))
    (folder / "cudart.lib").write_bytes(write_import_library(ShimList("cudart64_13.dll", (Export("cudaMalloc"),))))
    subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-O1", "-c", "dll.c", "-o", "dll.obj"], cwd=folder, check=True)
    subprocess.run(
        [lld_link, "/dll", "/nodefaultlib", "/noentry", "/out:model.dll", "dll.obj", "aoti_cuda_shims.lib", "cudart.lib"],
        cwd=folder, check=True,
    )
    return (folder / "model.dll").read_bytes()


def test_imports_name_each_dll_and_function(linked_dll):
    image = PeImage(linked_dll, "model.dll")
    assert image.machine == MACHINE_AMD64 and image.is_dll
    imports = image.imports()
    assert sorted(imports) == ["aoti_cuda_shims.dll", "cudart64_13.dll"]
    assert sorted(imports["aoti_cuda_shims.dll"]) == ["aoti_torch_check", "aoti_torch_warn"]
    assert imports["cudart64_13.dll"] == ["cudaMalloc"]


def test_exports_say_code_or_data(linked_dll):
    assert PeImage(linked_dll, "model.dll").exports() == {"run": "code", "table": "data"}


def test_an_image_without_tables_has_none():
    clang, lld_link = require_tool("clang"), require_tool("lld-link")
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "empty.c").write_text("static int unused(void) { return 0; }\n")
        subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-c", "empty.c", "-o", "empty.obj"], cwd=tmp, check=True)
        subprocess.run([lld_link, "/dll", "/nodefaultlib", "/noentry", "/out:empty.dll", "empty.obj"], cwd=tmp, check=True)
        image = PeImage(Path(tmp, "empty.dll").read_bytes(), "empty.dll")
    assert image.imports() == {} and image.exports() == {}


def test_truncated_or_damaged_images_are_one_line_format_errors(linked_dll):
    """Every prefix and a sweep of single-byte damage: a result or a FormatError, nothing else."""
    cuts = sorted({*range(0, 1024, 7), *range(1024, len(linked_dll), 97)})
    for cut in cuts:
        _read_all(linked_dll[:cut], f"cut at {cut}")
    for at in range(0, min(len(linked_dll), 4096), 11):
        damaged = bytearray(linked_dll)
        damaged[at] ^= 0xFF
        _read_all(bytes(damaged), f"flipped byte {at}")


def _read_all(data: bytes, label: str) -> None:
    try:
        image = PeImage(data, "model.dll")
        image.imports()
        image.exports()
    except FormatError as exc:
        message = str(exc)
        assert message.startswith("model.dll: ") and "\n" not in message, label
