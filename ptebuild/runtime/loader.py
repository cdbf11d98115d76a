"""Loads a ``.pte`` with its ``.ptd`` files after checking, without executing, that they belong together.

The check reads only headers and flatbuffers (:mod:`.pte_file`, :mod:`.ptd_file`): every
named-data key the program needs must be in one of the given ``.ptd`` files. Because
ptebuild keys weights by the SHA-256 of their bytes (:mod:`.keys`), a ``.ptd`` built for
another program, even one of the same architecture, is refused here with a
:class:`~ptebuild.errors.LoadError` naming the missing key. ``executorch.runtime`` is
imported only after the check passes, to execute.

A delegate's keys are listed by the payload reader its backend declares (:mod:`.payloads`).

Two limits of executorch 1.5.1 shape this module: its Python runtime (and its ``TextLLMRunner``)
takes a single ``.ptd`` per program, and it crashes (SIGSEGV) in ``load_method`` on a program
whose delegate's weights are external when no ``.ptd`` is given; the check here refuses that case
first. A program whose keys are split over several files by design (an LLM with a LoRA adapter:
its foundation weights in one ``.ptd`` shared with other programs, the adapter's in its own, as
ExecuTorch's C++ ``Module`` takes them, ``data_files``) is loaded with ``allow_split``: the files
it needs are merged, streamed, into one temporary ``.ptd`` (:func:`one_data_file`: the same
blobs under the same keys, :mod:`.ptd_merge`), deleted once the program is gone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import DAMAGED, FormatError, LoadError
from ptebuild.runtime.keys import sha256_in_key
from ptebuild.runtime.ptd_file import PtdFile, read_ptd
from ptebuild.runtime.pte_file import PteFile, read_pte
from ptebuild.runtime.record import read_build_record


@dataclass(frozen=True)
class CheckedFiles:
    """A ``.pte`` and the one ``.ptd`` (or none) that holds every key it needs."""

    pte: PteFile
    data_path: Path | None
    """The one given ``.ptd`` that holds every key the program needs (None: it needs none, or they
    are split over :attr:`data_paths`)."""
    data_paths: tuple[Path, ...] = ()
    """The given ``.ptd`` files that hold keys the program needs, in the order given."""


class VerifiedProgram:
    """An executorch Program whose ``.ptd`` was checked to belong to it. Built by :func:`load`."""

    def __init__(self, checked: CheckedFiles, program: Any) -> None:
        self.pte_path = checked.pte.path
        self.data_path = checked.data_path
        self.method_names: tuple[str, ...] = checked.pte.method_names
        self._program = program

    def run(self, method: str, inputs: Sequence[Any]) -> list[Any]:
        """Runs ``method`` on ``inputs`` (torch tensors) and returns its outputs as a list.

        Raises:
            LoadError: the program has no such method, or executorch cannot load it.
        """
        if method not in self.method_names:
            raise LoadError(
                f"{self.pte_path}: no method {method!r}; call one of {', '.join(self.method_names)}"
            )
        try:
            loaded = self._program.load_method(method)
        except RuntimeError as exc:
            raise LoadError(f"{self.pte_path}: executorch cannot load method {method!r}: {exc}; "
                            "`ptebuild verify` the folder, or build the program again") from exc
        return list(loaded.execute(list(inputs)))


def load(
    pte: str | Path, data: Sequence[str | Path] = (), verify_bytes: bool = False, allow_split: bool = False
) -> VerifiedProgram:
    """Checks that ``data`` holds every key ``pte`` needs, then loads it with executorch.

    Args:
        pte: the program.
        data: the ``.ptd`` files to search, in order (a single path is accepted too).
        verify_bytes: also hash every blob of every ``.ptd`` and compare it with the
            SHA-256 in its key.
        allow_split: a program whose keys are split over several of ``data`` is loaded with
            their union (:func:`one_data_file`) instead of refused.

    Raises:
        LoadError: a needed key is missing (the message names the ``.pte``, the key and
            the ``.ptd`` files searched), a blob does not match its key, the keys are
            split over several ``.ptd`` files, or executorch refuses the program.
        FormatError: a file is not a valid ``.pte``/``.ptd``.
    """
    try:
        checked = check(pte, data, verify_bytes=verify_bytes, allow_split=allow_split)
    except FormatError as exc:
        raise exc.with_fix(DAMAGED) from None
    from executorch.runtime import Runtime

    merged = _merged(checked)
    try:
        program = Runtime.get().load_program(checked.pte.path, data_path=merged or checked.data_path)
    except RuntimeError as exc:
        raise LoadError(f"{checked.pte.path}: executorch cannot load the program: {exc}; "
                        "`ptebuild verify` the folder, or build the program again") from exc
    verified = VerifiedProgram(checked, program)
    if merged is not None:
        import shutil
        import weakref

        weakref.finalize(verified, shutil.rmtree, merged.parent, True)
    return verified


def check(pte: str | Path, data: Sequence[str | Path] = (), verify_bytes: bool = False,
          allow_split: bool = False) -> CheckedFiles:
    """The checks of :func:`load`, without loading; imports neither torch nor executorch."""
    if isinstance(data, (str, Path)):
        data = [data]  # one path, not a sequence of one-letter paths
    program = read_pte(pte)
    ptds = [read_ptd(path) for path in data]
    _require_keys(program, ptds)
    if verify_bytes:
        for ptd in ptds:
            _verify_blobs(ptd, program.required_keys)
    holders = tuple(ptd.path for ptd in ptds if program.required_keys & ptd.keys)
    if allow_split and len(holders) > 1 and not any(program.required_keys <= ptd.keys for ptd in ptds):
        return CheckedFiles(program, None, holders)
    return CheckedFiles(program, _single_data_file(program, ptds), holders)


def _merged(checked: CheckedFiles) -> Path | None:
    """The union of the files a split program needs, in a temporary folder; None if not split."""
    if checked.data_path is not None or len(checked.data_paths) < 2:
        return None
    import tempfile

    from ptebuild.runtime.ptd_merge import merge_ptd

    folder = Path(tempfile.mkdtemp(prefix="ptebuild-ptd-"))
    dest = folder / "merged.ptd"
    merge_ptd(checked.data_paths, dest)
    return dest


@contextlib.contextmanager
def one_data_file(pte: str | Path, data: Sequence[str | Path] = (), verify_bytes: bool = False) -> Iterator[Path | None]:
    """The one ``.ptd`` to give executorch 1.5.1's runtime or runner for ``pte`` with ``data``:
    the file that holds every key it needs, or (keys split over several, as a LoRA program's)
    their union merged into a temporary file, deleted on leaving. Raises as :func:`check`."""
    checked = check(pte, data, verify_bytes=verify_bytes, allow_split=True)
    merged = _merged(checked)
    try:
        yield merged or checked.data_path
    finally:
        if merged is not None:
            import shutil

            shutil.rmtree(merged.parent, ignore_errors=True)


def _require_keys(program: PteFile, ptds: list[PtdFile]) -> None:
    available = frozenset().union(*(ptd.keys for ptd in ptds))
    missing = sorted(program.required_keys - available)
    if not missing:
        return
    searched = ", ".join(_describe(ptd.path) for ptd in ptds) or "no .ptd given"
    expected = _describe_expected(program.path)
    raise LoadError(
        f"{program.path}: needs key {missing[0]!r}"
        f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}, "
        f"not found in the .ptd files searched: {searched}{expected}; give the .ptd built with this .pte"
    )


def _describe(ptd_path: Path) -> str:
    record = read_build_record(ptd_path.parent)
    programs = record.programs_using(ptd_path) if record else []
    if record is None or not programs:
        return str(ptd_path)
    return f"{ptd_path} (built for {', '.join(map(repr, programs))} per {record.path.name})"


def _describe_expected(pte_path: Path) -> str:
    record = read_build_record(pte_path.parent)
    if record is None:
        return ""
    wanted = [
        file
        for name in record.programs_using(pte_path)
        for file in record.programs[name].data
    ]
    return f"; {record.path.name} pairs it with {', '.join(wanted)}" if wanted else ""


def _verify_blobs(ptd: PtdFile, required: frozenset[str]) -> None:
    digests = ptd.sha256_by_segment()
    for key, entry in sorted(ptd.entries.items()):
        promised = sha256_in_key(key)
        if promised is None:
            if key in required:
                raise LoadError(
                    f"{ptd.path}: cannot verify key {key!r}: it carries no sha256 (not built by ptebuild?); "
                    "give the .ptd ptebuild built with the .pte"
                )
            continue
        actual = digests[entry.segment_index]
        if actual != promised:
            raise LoadError(
                f"{ptd.path}: blob of key {key!r} at offset {entry.offset} hashes to "
                f"sha256:{actual}: the file is corrupt; build it again"
            )


def _single_data_file(program: PteFile, ptds: list[PtdFile]) -> Path | None:
    """Returns the one ``.ptd`` holding all needed keys (executorch 1.5.1 takes only one)."""
    if not program.required_keys:
        return None
    for ptd in ptds:
        if program.required_keys <= ptd.keys:
            return ptd.path
    raise LoadError(
        f"{program.path}: its keys are split over {', '.join(str(p.path) for p in ptds)}; "
        "executorch 1.5.1 loads one .ptd per program: give the program one data name"
    )
