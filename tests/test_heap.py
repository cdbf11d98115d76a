"""ptebuild.heap: with large frees returned, memory freed in the middle of the heap goes back to the
system; with glibc's default (its threshold raised by a large block freed) it stays resident. Once
told, torch's allocator asks for huge pages for a large tensor (the kernel's ``THPeligible``).

Each case runs in a fresh interpreter: the allocator's settings are the process's for good."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import THP_ELIGIBLE, transparent_huge_pages

SCRIPT = """
import sys
from ptebuild import heap
if sys.argv[1] == "fixed":
    assert heap.return_large_frees()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
big = bytearray(30 << 20)    # mapped; freeing it raises glibc's default threshold to 30 MiB
del big
blocks = [bytearray(4 << 20) for _ in range(64)]   # 256 MiB in 4 MiB blocks, each written
keep = bytearray(4 << 20)   # allocated after them: the heap's top is not free
before = rss()
del blocks
print((before - rss()) >> 20)
"""


def _freed_mib(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator (Linux)")
def test_freed_blocks_go_back_to_the_system_only_with_large_frees_returned():
    assert _freed_mib("default") < 64  # kept in the heap
    assert _freed_mib("fixed") >= 240  # each 4 MiB block unmapped when freed


HUGE_PAGES = THP_ELIGIBLE + """
import sys
from ptebuild import heap
if sys.argv[1] == "asked":
    heap.huge_pages_for_tensors()
import torch
tensor = torch.ones(8 << 20, dtype=torch.uint8)   # 8 MiB, written
print(thp_eligible(tensor.data_ptr()))
"""


def _eligible(mode: str, environment: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"} | environment
    done = subprocess.run([sys.executable, "-c", HUGE_PAGES, mode], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(transparent_huge_pages() != "madvise", reason="the kernel gives huge pages to what asks (madvise mode)")
def test_torch_asks_for_huge_pages_for_a_large_tensor_once_told_and_not_against_the_users_word():
    assert _eligible("plain", {}) == "0"
    assert _eligible("asked", {}) == "1"
    assert _eligible("asked", {"THP_MEM_ALLOC_ENABLE": "0"}) == "0"  # the user's setting stands
