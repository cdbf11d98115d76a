"""Fixtures shared by ptebuild's own tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from project_copy import copy_project


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A private copy of the tiny project, free to edit: returns the manifest path."""
    return copy_project(tmp_path / "project")


# Builds in tests lower in worker processes of their own: a warm server per test cache would
# outlive the test by minutes. The warm server's own tests ask for it with --executor daemon.
os.environ.setdefault("PTEBUILD_NO_DAEMON", "1")
