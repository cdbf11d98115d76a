"""The warm server's own tests start servers per cache folder and count them: no shared folder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def servers_per_cache_folder(monkeypatch):
    monkeypatch.delenv("PTEBUILD_WORKERS_DIR", raising=False)
