"""Models as people write them: nested state, dicts, scalars, and the ways they fail (tests)."""
