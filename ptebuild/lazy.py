"""Lazy package exports: a name loads its module when first used (PEP 562).

Keeps ``import ptebuild.runtime`` and friends cheap for the no-op path and the CLI, while the
package still names its public API in one table.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: ``exports`` maps a name to the module that
    defines it, relative to the package as in a ``from`` import: ``"load"`` is the submodule
    ``package.load``, ``"..plan"`` the module ``plan`` beside the package."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        relative = module if module.startswith(".") else f".{module}"
        return getattr(importlib.import_module(relative, package), name)

    return __getattr__
