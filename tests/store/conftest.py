"""Fixtures of the store tests: for the remote tiers', a real nginx, a real BuildGrid and fault-injecting proxies.

They live with the remote-cache tests (``tests/remote/cache_fixtures.py``, with ``nginx_server``
and ``faultproxy``), which use them too.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "remote"))

from cache_fixtures import _no_env_proxy, buildgrid, closed_port, grpc_proxy, nginx, proxy, space

__all__ = ["_no_env_proxy", "buildgrid", "closed_port", "grpc_proxy", "nginx", "proxy", "space"]
