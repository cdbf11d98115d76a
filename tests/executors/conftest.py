"""The warm server's own tests start servers per cache folder and count them: no shared folder.
The Ray executor's nodes share a remote cache: the nginx of the remote-cache tests."""

from __future__ import annotations

import pytest
from cache_fixtures import nginx, proxy  # the Ray executor's nodes share a remote cache

__all__ = ["nginx", "proxy"]


@pytest.fixture(autouse=True)
def servers_per_cache_folder(monkeypatch):
    monkeypatch.delenv("PTEBUILD_WORKERS_DIR", raising=False)
