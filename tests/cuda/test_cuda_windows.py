"""The Windows side of the CUDA backend with the real tools: MinGW-w64 links a DLL through the link
folder (the shim import library and ``libcudart.a`` made from a CUDA runtime DLL's exports), and
the DLL check refuses what would not load on Windows. The CUDA runtime DLL here is a stand-in
built by clang and lld-link with the real one's name; the real one was used on the GPU machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shims"))
from shim_tools import SHIPPED_DEF, require_tool

from ptebuild.backends.cuda import windows as cuda_windows
from ptebuild.errors import CheckError
from ptebuild.shims import load_shim_list, write_import_library
from ptebuild.shims.reader import read_import_library

MINGW_GXX = "x86_64-w64-mingw32-g++"

CUDART_SOURCE = """
__declspec(dllexport) int cudaMalloc(void **p, unsigned long long n) { return 0; }
__declspec(dllexport) int cudaFree(void *p) { return 0; }
__declspec(dllexport) int cudaRuntimeVersionTable[2] = {13, 0};
"""

PROGRAM_SOURCE = """
#include <stddef.h>
#include <vector>
extern "C" __declspec(dllimport) int aoti_torch_clone(void *, void **);
extern "C" int cudaMalloc(void **, size_t);
extern "C" __declspec(dllexport) int run(void *t) {
    std::vector<int> sizes(3);
    void *out;
    return aoti_torch_clone(t, &out) + cudaMalloc(&out, sizes.size());
}
"""


@pytest.fixture(scope="module")
def windows_cuda_home(tmp_path_factory):
    """A Windows CUDA tree laid out like the PyPI wheel: bin/x86_64/cudart64_13.dll and a
    lib/x64/cudart.lib that no linker can read (were it used, the link would fail)."""
    clang, lld_link = require_tool("clang"), require_tool("lld-link")
    home = tmp_path_factory.mktemp("cuda")
    (home / "bin" / "x86_64").mkdir(parents=True)
    (home / "lib" / "x64").mkdir(parents=True)
    (home / "cudart.c").write_text(CUDART_SOURCE)
    subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-c", "cudart.c", "-o", "cudart.obj"], cwd=home, check=True)
    subprocess.run([lld_link, "/dll", "/nodefaultlib", "/noentry", "/out:bin/x86_64/cudart64_13.dll", "cudart.obj"],
                   cwd=home, check=True)
    (home / "lib" / "x64" / "cudart.lib").write_bytes(b"not an archive: an MSVC library MinGW cannot link\n")
    return home


@pytest.fixture(scope="module")
def shim_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shims")
    (folder / "aoti_cuda_shims.lib").write_bytes(write_import_library(load_shim_list(SHIPPED_DEF)))
    return folder


def test_link_folder_holds_both_import_libraries_at_a_path_of_their_contents(windows_cuda_home, shim_dir, tmp_path):
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == ["aoti_cuda_shims.lib", "libcudart.a"]
    cudart = read_import_library((folder / "libcudart.a").read_bytes(), "libcudart.a")
    assert cudart.dll == "cudart64_13.dll"
    assert {(e.name, e.type) for e in cudart.exports} == {
        ("cudaFree", "code"), ("cudaMalloc", "code"), ("cudaRuntimeVersionTable", "data")
    }
    assert (folder / "aoti_cuda_shims.lib").read_bytes() == (shim_dir / "aoti_cuda_shims.lib").read_bytes()
    assert cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path) == folder  # same contents, same path
    other = tmp_path / "other-shims"
    other.mkdir()
    (other / "aoti_cuda_shims.lib").write_bytes(b"!<arch>\n")
    assert cuda_windows.link_folder(other, windows_cuda_home, tmp_path) != folder


STATIC_RUNTIME = ("-static-libstdc++", "-static-libgcc", "-Wl,-Bstatic", "-lwinpthread", "-Wl,-Bdynamic")  # as AOTInductor links


def _link(tmp_path: Path, folders: list[Path], *extra: str, env: dict | None = None) -> bytes:
    gxx = require_tool(MINGW_GXX)
    (tmp_path / "program.cpp").write_text(PROGRAM_SOURCE)
    command = [gxx, "program.cpp", "-O2", "-shared", "-std=c++17", *extra, "-o", "program.dll",
               "-laoti_cuda_shims", "-lcudart", *(f"-L{f}" for f in folders)]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return (tmp_path / "program.dll").read_bytes()


def test_mingw_links_a_self_contained_dll_through_the_link_folder(windows_cuda_home, shim_dir, tmp_path):
    """Searched first, the link folder's libcudart.a wins over the unreadable cudart.lib, and its
    libpthread.a keeps libwinpthread-1.dll out of the DLL's imports."""
    gxx = require_tool(MINGW_GXX)
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path / "root", gxx)
    assert (folder / "libpthread.a").is_file()
    dll = _link(tmp_path, [folder, windows_cuda_home / "lib" / "x64"], *STATIC_RUNTIME)
    exported = {"aoti_cuda_shims.dll": load_shim_list(SHIPPED_DEF).names(), "cudart64_13.dll": {"cudaMalloc", "cudaFree"}}
    imports = cuda_windows.check_dll(dll, "program.dll", exported, "aoti_cuda_shims.dll")
    assert imports == {"KERNEL32.dll": imports["KERNEL32.dll"], "msvcrt.dll": imports["msvcrt.dll"],
                       "aoti_cuda_shims.dll": 1, "cudart64_13.dll": 1}


def test_without_the_folders_libpthread_the_dll_would_need_the_mingw_runtime(windows_cuda_home, shim_dir, tmp_path):
    """AOTInductor's own flags: its ``-Wl,-Bstatic -lwinpthread`` comes before what needs it."""
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path / "root")  # no compiler: no libpthread.a
    dll = _link(tmp_path, [folder], *STATIC_RUNTIME)
    with pytest.raises(CheckError) as info:
        cuda_windows.check_dll(dll, "program.dll", {}, "aoti_cuda_shims.dll")
    assert str(info.value) == (
        "program.dll: the DLL needs libwinpthread-1.dll, a MinGW runtime DLL that Windows machines lack; link it statically"
    )


def test_check_refuses_a_shim_the_library_does_not_export(windows_cuda_home, shim_dir, tmp_path):
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path / "root", require_tool(MINGW_GXX))
    dll = _link(tmp_path, [folder], *STATIC_RUNTIME)
    fewer = load_shim_list(SHIPPED_DEF).names() - {"aoti_torch_clone"}
    with pytest.raises(CheckError) as info:
        cuda_windows.check_dll(dll, "program.dll", {"aoti_cuda_shims.dll": fewer, "cudart64_13.dll": {"cudaMalloc"}},
                               "aoti_cuda_shims.dll")
    assert str(info.value) == (
        "program.dll: the DLL imports aoti_torch_clone from aoti_cuda_shims.dll, which does not export it; "
        "add it to the shim list"
    )


def test_check_refuses_a_dll_that_needs_libstdcxx(windows_cuda_home, shim_dir, tmp_path):
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path / "root", require_tool(MINGW_GXX))
    dll = _link(tmp_path, [folder])  # libstdc++ linked dynamically
    with pytest.raises(CheckError, match=r"needs (libstdc\+\+-6|libgcc_s_seh-1)\.dll, a MinGW runtime DLL"):
        cuda_windows.check_dll(dll, "program.dll", {}, "aoti_cuda_shims.dll")


def test_check_refuses_what_is_not_an_x86_64_dll(tmp_path):
    with pytest.raises(CheckError, match="not an x86-64 Windows DLL"):
        clang, lld_link = require_tool("clang"), require_tool("lld-link")
        (tmp_path / "a.c").write_text("int main(void) { return 0; }\n")
        subprocess.run([clang, "--target=x86_64-pc-windows-msvc", "-c", "a.c", "-o", "a.obj"], cwd=tmp_path, check=True)
        subprocess.run([lld_link, "/nodefaultlib", "/entry:main", "/out:a.exe", "a.obj"], cwd=tmp_path, check=True)
        cuda_windows.check_dll((tmp_path / "a.exe").read_bytes(), "a.exe", {}, "aoti_cuda_shims.dll")


def test_dll_bytes_repeat_under_the_lowering_environment(windows_cuda_home, shim_dir, tmp_path):
    """MinGW's ld stamps each DLL with the link time unless SOURCE_DATE_EPOCH is set, as the
    lowering sets it: two links a second apart, at one path, differ without it and not with it."""
    import os
    import time

    from ptebuild.backends.cuda import inductor

    gxx = require_tool(MINGW_GXX)
    folder = cuda_windows.link_folder(shim_dir, windows_cuda_home, tmp_path / "root", gxx)
    env = {k: v for k, v in os.environ.items() if k != "SOURCE_DATE_EPOCH"}

    def twice(environment):
        results = []
        for _ in range(2):
            (tmp_path / "program.dll").unlink(missing_ok=True)
            results.append(_link(tmp_path, [folder], *STATIC_RUNTIME, env=environment))
            time.sleep(1.1)
        return results

    first, second = twice(env)
    assert first != second
    first, second = twice({**env, "SOURCE_DATE_EPOCH": inductor.reproducible_environment()["SOURCE_DATE_EPOCH"]})
    assert first == second
