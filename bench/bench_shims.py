"""Benchmark (not a test): write and read an import library of 10,000 exports.

Run: ``.venv/bin/python bench/bench_shims.py [--exports N] [--runs R]``. Prints the median of R runs
for writing (gnu and coff), reading back, and, as a baseline, llvm-dlltool on the same list
(process start included). The target is under 100 ms for writing and for reading.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ptebuild.shims import Export, ShimList, format_def, read_import_library, write_import_library


def median_ms(function, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exports", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    kinds = ["code"] * 8 + ["data", "const"]
    shims = ShimList(
        "aoti_cuda_shims.dll",
        tuple(Export(f"aoti_torch_shim_{i:05d}_{'x' * (i % 13)}", kinds[i % 10]) for i in range(args.exports)),
    )
    gnu = write_import_library(shims, "gnu")
    print(f"{args.exports} exports, {len(gnu):,} bytes (gnu); median of {args.runs} runs:")
    print(f"  write gnu (sorted)      {median_ms(lambda: write_import_library(shims, 'gnu'), args.runs):8.1f} ms")
    print(f"  write gnu (keep order)  {median_ms(lambda: write_import_library(shims, 'gnu', True), args.runs):8.1f} ms")
    print(f"  write coff (sorted)     {median_ms(lambda: write_import_library(shims, 'coff'), args.runs):8.1f} ms")
    print(f"  read gnu                {median_ms(lambda: read_import_library(gnu, 'bench.lib'), args.runs):8.1f} ms")
    coff = write_import_library(shims, "coff")
    print(f"  read coff               {median_ms(lambda: read_import_library(coff, 'bench.lib'), args.runs):8.1f} ms")
    tool = shutil.which("llvm-dlltool")
    if tool is None:
        print("  llvm-dlltool            not installed (Debian package llvm)")
        return 0
    with tempfile.TemporaryDirectory() as directory:
        def_path, lib_path = Path(directory) / "bench.def", Path(directory) / "bench.lib"
        def_path.write_text(format_def(shims.canonical()))
        command = [tool, "-m", "i386:x86-64", "-D", shims.dll, "-d", str(def_path), "-l", str(lib_path)]
        elapsed = median_ms(lambda: subprocess.run(command, check=True), args.runs)
        same = lib_path.read_bytes() == gnu
        print(f"  llvm-dlltool (baseline) {elapsed:8.1f} ms  (byte-identical to ours: {'yes' if same else 'NO'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
