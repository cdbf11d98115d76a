"""The warm server's children (:mod:`ptebuild.daemon.children`): what the server does before it forks
them, and when it must not fork.

Each test runs in a fresh interpreter of its own (the server's situation: torch and executorch
imported, nothing run yet), never in pytest's process, whose threads and torch state are not a
server's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

PREPARED = """
import os, sys, threading, time
from ptebuild.worker.execute import prepare_worker
prepare_worker()
import torch
from ptebuild.daemon.children import fork_is_safe, native_threads, warm_before_forking

def forked_child_runs_torch_in_parallel():
    '''A forked child's parallel torch work finishes (a child forked over an OpenMP pool hangs).'''
    pid = os.fork()
    if pid == 0:
        torch.set_num_threads(2)
        a = torch.randn(1500, 1500)
        for _ in range(3):
            (a @ a).sum().item()
            torch.nn.functional.gelu(torch.randn(3_000_000)).sum().item()
        os._exit(0)
    for _ in range(600):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return False
"""


def _run(body: str) -> list[str]:
    script = PREPARED + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line.startswith("|")]


def test_the_warm_up_makes_xnnpacks_pattern_graphs_once_and_starts_no_thread():
    """XNNPACK's passes match against pattern graphs upstream makes by exporting small modules the
    first time a process lowers (seconds, cached per process): the server makes them before it
    forks, so that no child makes them again, and stays a process that may fork."""
    lines = _run("""
        from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa
        threads = native_threads()
        threads_wanted = torch.get_num_threads()
        problems = warm_before_forking()
        print("|problems", problems)
        print("|cached", bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize, sdpa.get_graphs.cache_info().currsize)
        print("|threads", native_threads() == threads, threading.active_count(), torch.get_num_threads() == threads_wanted)
        print("|safe", fork_is_safe())
        print("|child", forked_child_runs_torch_in_parallel())
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # a child finds them made
            bilinear_2d.get_graphs_dict(); sdpa.get_graphs()
            os._exit(0 if bilinear_2d._get_bilinear_2d_graphs.cache_info().hits == 1 else 3)
        print("|child cache", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    assert lines == ["|problems []", "|cached 1 1", "|threads True 1 True", "|safe None", "|child True", "|child cache 0"]


def test_a_process_whose_torch_started_its_thread_pool_is_not_forked():
    """The check before each fork counts the process's native threads, not only Python's: a server
    whose torch ran parallel work (OpenMP's pool started) would fork children that hang."""
    lines = _run("""
        print("|before", fork_is_safe())
        torch.set_num_threads(2)
        torch.nn.functional.gelu(torch.randn(4_000_000)).sum().item()
        print("|after", fork_is_safe())
    """)
    assert lines[0] == "|before None"
    assert lines[1].startswith("|after ") and "native threads are running" in lines[1], lines
