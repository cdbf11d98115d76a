"""Fixtures of the remote-cache tests: a real nginx, a real BuildGrid and fault-injecting proxies (``cache_fixtures``)."""

from __future__ import annotations

from cache_fixtures import _no_env_proxy, buildgrid, closed_port, grpc_proxy, nginx, proxy, space

__all__ = ["_no_env_proxy", "buildgrid", "closed_port", "grpc_proxy", "nginx", "proxy", "space"]
