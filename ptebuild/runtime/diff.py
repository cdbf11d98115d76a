"""Which part of two ``.pte`` or ``.ptd`` files differs, as diffoscope says it for other formats.

Both files are described by :mod:`.inspect` and compared part by part, in file order:

- ``.pte``: the header, the program version, each method (only in one file; its plan:
  inputs, outputs, values, chains, operators, delegate specs; each delegate's payload), the
  segments no delegate uses (constant tensors, named data), the named data keys, the constant
  buffers, the keys needed from a ``.ptd``;
- ``.ptd``: the header, the version, each key (only in one file, or other bytes).

A delegate payload that differs is named with its method and backend, with the first differing
byte inside the payload; the segment holding it is not reported again. Two files whose bytes
differ but whose parts all agree get one ``bytes`` difference at the first differing offset
(padding, or a part this reader does not decode). Imports neither torch nor executorch.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.hashing import hash_file
from ptebuild.runtime.inspect import DataKey, MethodInfo, PtdInspection, PteInspection, inspect

_CHUNK = 1 << 20


class Part(str, enum.Enum):
    """The kind of part a difference is in."""

    KIND = "kind"
    HEADER = "header"
    VERSION = "version"
    METHOD = "method"
    PLAN = "plan"
    DELEGATE = "delegate"
    SEGMENT = "segment"
    DATA_KEY = "data-key"
    CONSTANTS = "constants"
    NEEDS = "needs"
    BYTES = "bytes"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Difference:
    part: Part
    where: str
    """The part, e.g. ``method 'forward' delegate 0 (<delegate id>)``."""
    detail: str

    def __str__(self) -> str:
        return f"{self.where}: {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"part": str(self.part), "where": self.where, "detail": self.detail}


@dataclass(frozen=True)
class DiffReport:
    a: Path
    b: Path
    differences: tuple[Difference, ...]

    @property
    def same(self) -> bool:
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        return {"a": str(self.a), "b": str(self.b), "same": self.same, "differences": [d.to_json() for d in self.differences]}


def diff(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> DiffReport:
    """Compare two ``.pte``/``.ptd`` files. Identical bytes give no differences.

    Raises:
        FormatError: either file is not a valid ``.pte``/``.ptd``.
        OSError: either file cannot be read.
    """
    a, b = Path(a), Path(b)
    if _same_bytes(a, b):
        return DiffReport(a, b, ())
    left, right = inspect(a), inspect(b)
    found: list[Difference] = []
    if left.kind != right.kind:
        found.append(Difference(Part.KIND, "file", f"a .{left.kind} and a .{right.kind}"))
    elif isinstance(left, PteInspection) and isinstance(right, PteInspection):
        found += _diff_pte(left, right)
    else:
        assert isinstance(left, PtdInspection) and isinstance(right, PtdInspection)
        found += _diff_ptd(left, right)
    if not found:
        offset = _first_difference(a, 0, b, 0, max(os.path.getsize(a), os.path.getsize(b)))
        found.append(
            Difference(Part.BYTES, "bytes", f"differ first at offset {offset}, outside the parts ptebuild decodes (padding?)")
        )
    return DiffReport(a, b, tuple(found))


_DIGEST = re.compile(r"[0-9a-f]{64}")


def weights_only(a: str | Path, b: str | Path) -> bool:
    """True if two ``.pte`` files are one program with other weights: equal bytes once the SHA-256
    digests in their weight keys (and the bytes of the segments holding weights inside the
    ``.pte``: constants, named data) are masked. A change of shape, operator, plan or delegate
    payload (a delegate's int8 quantization parameters, computed from the weights, are in its
    payload) makes them differ.

    Raises FormatError / OSError when either cannot be read.
    """
    masked = [_masked(Path(path)) for path in (a, b)]
    return masked[0] == masked[1]


def _masked(path: Path) -> bytes:
    from ptebuild.runtime.pte_file import open_pte, read_pte

    program = read_pte(path)
    digests = {m for key in program.required_keys | program.named_data_keys for m in _DIGEST.findall(key)}
    data = bytearray(path.read_bytes())
    with open_pte(path) as pte:
        weight_segments = {named.segment_index() for named in pte.named_data()}
        constants = pte.constant_segment_index()
        if constants is not None:
            weight_segments.add(constants)
        for index in sorted(weight_segments):
            if index < len(pte.segments):
                offset, size = pte.segments[index]
                data[offset:offset + size] = bytes(size)
    masked = bytes(data)
    for digest in sorted(digests):
        masked = masked.replace(digest.encode(), b"0" * len(digest))
    return masked


def _same_bytes(a: Path, b: Path) -> bool:
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    return hash_file(a)[0] == hash_file(b)[0]


def _first_difference(a: Path, offset_a: int, b: Path, offset_b: int, size: int) -> int:
    """Offset (from the starts given) of the first byte that differs within ``size`` bytes."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        fa.seek(offset_a)
        fb.seek(offset_b)
        done = 0
        while done < size:
            want = min(_CHUNK, size - done)
            x, y = fa.read(want), fb.read(want)
            if x != y:
                n = min(len(x), len(y))
                return done + next((i for i in range(n) if x[i] != y[i]), n)
            if not x:
                break
            done += len(x)
    return done


def _header_diffs(left: dict[str, Any], right: dict[str, Any]) -> list[Difference]:
    changed = [f"{k} {left.get(k)} -> {right.get(k)}" for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]
    return [Difference(Part.HEADER, "header", ", ".join(changed))] if changed else []


def _diff_pte(a: PteInspection, b: PteInspection) -> list[Difference]:
    found = _header_diffs(a.header, b.header)
    if a.version != b.version:
        found.append(Difference(Part.VERSION, "program", f"version {a.version} -> {b.version}"))
    names_a, names_b = [m.name for m in a.methods], [m.name for m in b.methods]
    for name in names_a:
        if name not in names_b:
            found.append(Difference(Part.METHOD, f"method {name!r}", "only in the first file"))
    for name in names_b:
        if name not in names_a:
            found.append(Difference(Part.METHOD, f"method {name!r}", "only in the second file"))
    if [n for n in names_a if n in names_b] != [n for n in names_b if n in names_a]:
        found.append(Difference(Part.METHOD, "methods", f"in another order ({', '.join(names_a)} -> {', '.join(names_b)})"))
    for ma in a.methods:
        mb = b.method(ma.name)
        if mb is not None:
            found += _diff_method(a, ma, b, mb)
    # Segments that hold no delegate payload and no named data (those are reported above and below).
    other_a = [s for s in a.segments if s.index not in _claimed(a)]
    other_b = [s for s in b.segments if s.index not in _claimed(b)]
    for sa, sb in zip(other_a, other_b):
        what = ", ".join(sa.used_by) or "unused"
        if (sa.size, sa.sha256) != (sb.size, sb.sha256):
            found.append(Difference(Part.SEGMENT, f"segment {sa.index} ({what})", _bytes_change(sa.size, sa.sha256, sb.size, sb.sha256)))
    if len(other_a) != len(other_b):
        found.append(Difference(Part.SEGMENT, "segments", f"{len(a.segments)} -> {len(b.segments)}"))
    found += _diff_keys(a.named_data, b.named_data, "named data")
    if a.constant_buffers != b.constant_buffers:
        changed = sum(1 for x, y in zip(a.constant_buffers, b.constant_buffers) if x != y)
        found.append(
            Difference(
                Part.CONSTANTS,
                "constant buffers",
                f"{len(a.constant_buffers)} -> {len(b.constant_buffers)} buffers, {changed} with other bytes",
            )
        )
    if a.needs != b.needs:
        gone, new = sorted(set(a.needs) - set(b.needs)), sorted(set(b.needs) - set(a.needs))
        found.append(
            Difference(Part.NEEDS, "keys needed from a .ptd", f"{len(gone)} only in the first file, {len(new)} only in the second")
        )
    return found


def _claimed(program: PteInspection) -> set[int]:
    """Segments holding a delegate payload or a named data blob."""
    payloads = {d.data_index for m in program.methods for d in m.delegates if d.location == "segment"}
    return payloads | {k.segment for k in program.named_data}


def _diff_method(a: PteInspection, ma: MethodInfo, b: PteInspection, mb: MethodInfo) -> list[Difference]:
    found = []
    where = f"method {ma.name!r}"
    if ma.plan_sha256 != mb.plan_sha256:
        parts = [p for p in ma.plan_parts if ma.plan_parts.get(p) != mb.plan_parts.get(p)]
        details = []
        if _specs(ma) != _specs(mb):
            details.append(f"inputs {_specs(ma)} -> {_specs(mb)}")
        if _specs(ma, True) != _specs(mb, True):
            details.append(f"outputs {_specs(ma, True)} -> {_specs(mb, True)}")
        if ma.operators != mb.operators:
            gone = [o for o in ma.operators if o not in mb.operators]
            new = [o for o in mb.operators if o not in ma.operators]
            details.append(
                "operators " + (", ".join([f"-{o}" for o in gone] + [f"+{o}" for o in new]) or "in another order")
            )
        other = [p for p in parts if p not in ("inputs", "outputs", "operators")]
        if other:
            details.append(f"{', '.join(other)} differ ({ma.values} -> {mb.values} values, {ma.instructions} -> {mb.instructions} instructions)")
        found.append(Difference(Part.PLAN, f"{where} plan", "; ".join(details)))
    if len(ma.delegates) != len(mb.delegates):
        found.append(Difference(Part.DELEGATE, f"{where} delegates", f"{len(ma.delegates)} -> {len(mb.delegates)}"))
    for da, db in zip(ma.delegates, mb.delegates):
        name = f"{where} delegate {da.index} ({da.backend})"
        if da.backend != db.backend:
            found.append(Difference(Part.DELEGATE, name, f"backend {da.backend} -> {db.backend}"))
            continue
        if (da.size, da.sha256) == (db.size, db.sha256):
            continue
        detail = f"payload differs: {_bytes_change(da.size, da.sha256, db.size, db.sha256)}"
        if da.offset is not None and db.offset is not None:
            at = _first_difference(a.path, da.offset, b.path, db.offset, min(da.size, db.size))
            detail += f", first at payload byte {at}"
        if da.keys is not None and db.keys is not None and da.keys != db.keys:
            detail += f"; named keys {len(da.keys)} -> {len(db.keys)}, {len(set(da.keys) ^ set(db.keys))} changed"
        found.append(Difference(Part.DELEGATE, name, detail))
    return found


def _specs(method: MethodInfo, outputs: bool = False) -> str:
    return "(" + ", ".join(s.describe() for s in (method.outputs if outputs else method.inputs)) + ")"


def _bytes_change(size_a: int, sha_a: str, size_b: int, sha_b: str) -> str:
    sizes = f"{size_a} bytes" if size_a == size_b else f"{size_a} -> {size_b} bytes"
    return f"{sizes}, sha256 {sha_a[:12]}... -> {sha_b[:12]}..."


def _diff_keys(a: tuple[DataKey, ...], b: tuple[DataKey, ...], what: str) -> list[Difference]:
    found = []
    left, right = {k.key: k for k in a}, {k.key: k for k in b}
    for key in sorted(set(left) | set(right)):
        ka, kb = left.get(key), right.get(key)
        where = f"{what} key {key!r}"
        if kb is None:
            found.append(Difference(Part.DATA_KEY, where, "only in the first file"))
        elif ka is None:
            found.append(Difference(Part.DATA_KEY, where, "only in the second file"))
        elif (ka.size, ka.sha256) != (kb.size, kb.sha256):
            found.append(Difference(Part.DATA_KEY, where, _bytes_change(ka.size, ka.sha256, kb.size, kb.sha256)))
    return found


def _diff_ptd(a: PtdInspection, b: PtdInspection) -> list[Difference]:
    found = _header_diffs(a.header, b.header)
    if a.version != b.version:
        found.append(Difference(Part.VERSION, "data file", f"version {a.version} -> {b.version}"))
    found += _diff_keys(a.keys, b.keys, "data")
    return found
