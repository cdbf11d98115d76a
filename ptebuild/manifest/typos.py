""""Did you mean ...?" for the manifest's keys and names (:mod:`ptebuild.typos`, re-exported)."""

from __future__ import annotations

from ptebuild.typos import did_you_mean

__all__ = ["did_you_mean"]
