"""Fixtures of the shims tests (helpers live in shim_tools.py)."""

from __future__ import annotations





