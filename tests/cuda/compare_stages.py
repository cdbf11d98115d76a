"""Compare two runs' Inductor and Triton caches: which compiler stage first differs.

    python tests/cuda/compare_stages.py RUN0_DIR RUN1_DIR REPORT.txt [--keep DIFFS_DIR]

Cache file names are content hashes, so a file whose content differs shows up as one file only in
run 0 and another only in run 1. Files are grouped by their stage (their suffix: kernel source
``.py``, ``.ttir``, ``.ttgir``, ``.llir``, ``.ptx``, ``.cubin``, ``.json``, the wrapper's ``.cpp``);
for each stage the report gives how many files both runs share and how many are their own. Text
files that are some run's own are paired (Triton kernels by the kernel's name, the rest by size)
and their unified diff goes into the report, so the first stage with a difference, and the
difference itself, can be read off it. ``--keep`` copies the unpaired and differing files too.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

TEXT_SUFFIXES = {".py", ".ttir", ".ttgir", ".llir", ".ptx", ".cpp", ".json", ".txt", ".source"}
KERNEL_NAME = re.compile(r"def (triton_\w+)\(|\.entry (triton_\w+)\(|\"name\": \"(triton_\w+)\"")
MAX_DIFF_LINES = 400


def stage(path: Path) -> str:
    return path.suffix or path.name


def digests(root: Path) -> dict[str, list[Path]]:
    """sha256 → files with that content, under ``root``."""
    found: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            found[hashlib.sha256(path.read_bytes()).hexdigest()].append(path)
    return found


def kernel_name(path: Path) -> str | None:
    if path.suffix not in TEXT_SUFFIXES:
        return None
    match = KERNEL_NAME.search(path.read_text(errors="replace"))
    return next((group for group in match.groups() if group), None) if match else None


def pair(own0: list[Path], own1: list[Path]) -> list[tuple[Path | None, Path | None]]:
    """Pair one stage's files that only one run has: by kernel name, then by nearest size."""
    pairs = []
    left = list(own0)
    right = list(own1)
    by_name = defaultdict(list)
    for path in right:
        by_name[kernel_name(path)].append(path)
    for path in list(left):
        name = kernel_name(path)
        if name and by_name.get(name):
            match = by_name[name].pop(0)
            right.remove(match)
            left.remove(path)
            pairs.append((path, match))
    for path in sorted(left, key=lambda p: p.stat().st_size):
        if not right:
            pairs.append((path, None))
            continue
        match = min(right, key=lambda p: abs(p.stat().st_size - path.stat().st_size))
        right.remove(match)
        pairs.append((path, match))
    pairs.extend((None, path) for path in right)
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run0", type=Path)
    parser.add_argument("run1", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("--keep", type=Path, help="copy the files that only one run has here")
    args = parser.parse_args(argv)

    runs = [digests(args.run0), digests(args.run1)]
    shared = runs[0].keys() & runs[1].keys()
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    own: dict[str, tuple[list[Path], list[Path]]] = defaultdict(lambda: ([], []))
    for digest in shared:
        for path in runs[0][digest]:
            counts[stage(path)][0] += 1
    for index in (0, 1):
        for digest, paths in runs[index].items():
            if digest in shared:
                continue
            for path in paths:
                counts[stage(path)][index + 1] += 1
                own[stage(path)][index].append(path)

    lines = [f"{'stage':<12} {'same':>6} {'run0 own':>9} {'run1 own':>9}"]
    for name in sorted(counts):
        same, only0, only1 = counts[name]
        lines.append(f"{name:<12} {same:>6} {only0:>9} {only1:>9}")
    lines.append("")
    for name in sorted(own):
        for first, second in pair(*own[name]):
            label0 = first.relative_to(args.run0) if first else "-"
            label1 = second.relative_to(args.run1) if second else "-"
            lines.append(f"== {name}: {label0}  vs  {label1}")
            if first and second and name in TEXT_SUFFIXES:
                diff = list(difflib.unified_diff(
                    first.read_text(errors="replace").splitlines(),
                    second.read_text(errors="replace").splitlines(),
                    "run0", "run1", lineterm="", n=1))
                lines.extend(diff[:MAX_DIFF_LINES])
                if len(diff) > MAX_DIFF_LINES:
                    lines.append(f"... {len(diff) - MAX_DIFF_LINES} more diff lines")
            elif first and second:
                a, b = first.read_bytes(), second.read_bytes()
                at = [i for i in range(min(len(a), len(b))) if a[i] != b[i]]
                lines.append(f"binary: sizes {len(a)} {len(b)}, {len(at)} differing bytes in the common "
                             f"length, first at {at[:8]}")
            if args.keep:
                for index, path, root in ((0, first, args.run0), (1, second, args.run1)):
                    if path:
                        target = args.keep / f"run{index}" / path.relative_to(root)
                        target.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(path, target)
    args.report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: len(counts) + 1]))
    return 0 if not own else 1


if __name__ == "__main__":
    sys.exit(main())
