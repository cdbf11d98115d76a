"""The ``gpu`` marker: tests that build or run CUDA programs, skipped where no GPU is visible."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

GPU_SKIP_REASON = "needs a CUDA GPU (runs on the GPU machine)"


def pytest_configure(config):
    config.addinivalue_line("markers", f"gpu: {GPU_SKIP_REASON}")


def _gpu_usable() -> bool:
    from ptebuild.backends.cuda.toolchain import gpu_visible

    if not gpu_visible():
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("gpu")]
    if marked and not _gpu_usable():
        for item in marked:
            item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))
