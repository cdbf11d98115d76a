"""Small facts about processes (ptebuild.processes): resident memory, as the warm server reads it."""

from __future__ import annotations

import os
import subprocess
import sys

from ptebuild.processes import rss_bytes


def test_rss_bytes_is_the_resident_memory_of_a_live_process_and_zero_for_a_gone_one():
    before = rss_bytes(os.getpid())
    ballast = bytearray(64 << 20)  # touched: resident
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    assert rss_bytes(os.getpid()) >= before + (48 << 20)
    del ballast
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert rss_bytes(gone.pid) == 0
