"""Modules' ``forward`` replaced for the length of a block: the eager reference's own ways of
computing the same values (:mod:`.eager_embedding`, :mod:`.eager_linear`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def forwards_replaced(replacements: Sequence[tuple[Any, Callable[..., Any]]]) -> Iterator[None]:
    """While the block runs, each ``(module, forward)``'s module calls ``forward`` (an instance
    attribute, which torch's ``Module.__call__`` finds first); its class's is back afterwards."""
    for module, forward in replacements:
        module.forward = forward
    try:
        yield
    finally:
        for module, _ in replacements:
            del module.forward  # the instance attribute: the class's forward again
