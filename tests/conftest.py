"""Fixtures shared by ptebuild's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from project_copy import copy_project


@pytest.fixture
def tiny_project(tmp_path: Path) -> Path:
    """A private copy of the tiny project, free to edit: returns the manifest path."""
    return copy_project(tmp_path / "project")
