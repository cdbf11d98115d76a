"""A worker process isolates each task from the ones before it, but never from ptebuild itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_task_state_keeps_ptebuilds_own_modules_and_the_startup_path(tmp_path):
    # Seen on the GPU machine (ptebuild on PYTHONPATH, not installed): fresh_state dropped
    # ptebuild.deps, imported after the worker started; imported again after a CUDA lowering had
    # put setuptools' vendored packages on sys.path, its STARTUP_PATH held them, and every CUDA
    # program failed "distribution jaraco-context changed while the program was lowered".
    script = textwrap.dedent('''
        import sys
        from ptebuild.worker.execute import fresh_state, prepare_worker
        prepare_worker()
        import ptebuild.deps
        before = ptebuild.deps.STARTUP_PATH
        sys.path.append(sys.argv[1])  # as importing setuptools appends its _vendor folder
        fresh_state()
        import ptebuild.deps
        assert ptebuild.deps.__file__.startswith(sys.argv[2]), ptebuild.deps.__file__
        print(ptebuild.deps.STARTUP_PATH == before, sys.argv[1] in ptebuild.deps.STARTUP_PATH)
    ''')
    # ptebuild from a source folder on PYTHONPATH with no distribution beside it, as on the GPU machine
    shutil.copytree(ROOT / "ptebuild", tmp_path / "src" / "ptebuild", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "src"))
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "vendor"), str(tmp_path / "src")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]
