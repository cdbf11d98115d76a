""""Did you mean ...?" for near misses of keys and names (floor one: the manifest, the worker and the lowering all name near misses)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest candidate, or an empty string."""
    candidates = sorted(set(candidates))
    matches = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in candidates}
        if word.lower() in lowered:
            matches = [lowered[word.lower()]]
    return f" (did you mean {matches[0]!r}?)" if matches else ""
