"""Entry points that are no backend (see its ``pyproject.toml``)."""

NOT_A_BACKEND = {"name": "notabackend"}
