"""Byte sizes: parse ``500M``, ``2G``, ``1.5GiB``, ``1000`` and format them back (``--max-size``,
the manifest's budgets, the reports).

Units follow ccache and the SI/IEC standards: ``K``/``KB``, ``M``/``MB``, ``G``/``GB``,
``T``/``TB`` are powers of 1000; ``Ki``/``KiB``, ``Mi``/``MiB``, ``Gi``/``GiB``, ``Ti``/``TiB``
are powers of 1024; a bare number or ``B`` is bytes. Case of the unit letter is ignored.
"""

from __future__ import annotations

import re

from ptebuild.errors import UsageError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """Bytes meant by ``text`` (e.g. ``"500M"`` -> 500_000_000, ``"1.5GiB"`` -> 1_610_612_736).

    Raises UsageError with the accepted forms if ``text`` is not a size.
    """
    m = _SIZE_RE.fullmatch(text) if isinstance(text, str) else None
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UsageError(
            f"invalid size {text!r}: give a number with an optional unit, e.g. 500M, 2G, 1.5GiB "
            "(K, M, G, T: powers of 1000, KiB, MiB, GiB, TiB: powers of 1024)"
        )
    number = m.group(1)
    if "." in number:
        from decimal import Decimal

        return int(Decimal(number) * _UNITS[unit])
    return int(number) * _UNITS[unit]


def format_size(n: int) -> str:
    """A short human form of a byte count, in powers of 1024 (``1.5 GiB``, ``512 B``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
