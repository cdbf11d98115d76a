"""A real headless browser for the tests of pages ptebuild writes (``build --timings``).

Chromium from Debian's packages (``apt-get install chromium``; bootstrap.sh --test installs it),
run with no network, no first-run work and an empty profile of its own. What it gives back:
the DOM after rendering (``--dump-dom``) and a screenshot (``--screenshot``), read here by a
small PNG decoder (zlib and struct: no imaging library needed).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

from helpers import unavailable

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-extensions", "--hide-scrollbars",
)


def chromium() -> str:
    """The browser's path, or the test is skipped (fails under CI)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        unavailable("chromium is not installed (apt-get install chromium)")
    return found


def _run(page: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="ptebuild-chromium-") as profile:
        return subprocess.run(
            [chromium(), *FLAGS, f"--user-data-dir={profile}", *flags, page.resolve().as_uri()],
            capture_output=True, text=True, timeout=120, cwd=profile, check=False,
        )


def dump_dom(page: Path) -> str:
    """The document as the browser holds it after loading ``page``."""
    done = _run(page, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(page: Path, png: Path, width: int = 1400, height: int = 900) -> Path:
    """A PNG of ``page`` rendered at ``width`` x ``height``."""
    done = _run(page, f"--screenshot={png}", f"--window-size={width},{height}")
    assert done.returncode == 0 and png.is_file(), done.stderr[-2000:]
    return png


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """``(width, height, rows)`` of an 8-bit RGB or RGBA PNG, each row its pixels' bytes."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat = 8, b""
    width = height = channels = 0
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0, f"unsupported PNG: depth {depth}, colour {colour}"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + predictor) & 0xFF
        rows.append(bytes(line) if channels == 3 else bytes(b for j, b in enumerate(line) if j % 4 != 3))
        previous = line
    return width, height, rows


def colours(path: Path) -> dict[tuple[int, int, int], int]:
    """How many pixels of each RGB colour the PNG has."""
    _, _, rows = png_pixels(path)
    found: dict[tuple[int, int, int], int] = {}
    for row in rows:
        for i in range(0, len(row), 3):
            pixel = (row[i], row[i + 1], row[i + 2])
            found[pixel] = found.get(pixel, 0) + 1
    return found
