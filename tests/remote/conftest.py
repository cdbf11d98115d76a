"""Fixtures of the remote-cache tests: a real nginx and a fault-injecting proxy (``cache_fixtures``)."""

from __future__ import annotations

from cache_fixtures import _no_env_proxy, buildgrid, closed_port, grpc_proxy, nginx, proxy, space

__all__ = ["_no_env_proxy", "buildgrid", "closed_port", "grpc_proxy", "nginx", "proxy", "space"]
