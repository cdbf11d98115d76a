"""The plug-in backends of these tests, installed once per session into a folder of their own.

:func:`demo_env` is the environment a ``ptebuild`` process finds them in: the folder on
``PYTHONPATH``, where :func:`importlib.metadata.entry_points` finds their ``.dist-info`` as it
finds any installed distribution's (:mod:`install`). This process never imports them.
"""

from __future__ import annotations

import pytest
from install import HERE, install, plugin_env


@pytest.fixture(scope="session")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``PYTHONPATH`` holding the demo backend (``ptebuild-demo-backend``)."""
    return plugin_env(install(HERE / "ptebuild_demo_backend", tmp_path_factory.mktemp("demo-site")))


@pytest.fixture(scope="session")
def broken_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``PYTHONPATH`` holding the demo backend and the broken ones (``ptebuild-broken-backend``)."""
    site = tmp_path_factory.mktemp("broken-site")
    install(HERE / "ptebuild_demo_backend", site)
    return plugin_env(install(HERE / "ptebuild_broken_backend", site))
