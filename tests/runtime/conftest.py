"""Session fixture: the tiny programs of :mod:`runtime_programs`, exported once."""

from __future__ import annotations

import pytest
from runtime_programs import Programs, build_all


@pytest.fixture(scope="session")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Programs:
    return build_all(tmp_path_factory.mktemp("built"))
