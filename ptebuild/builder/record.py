"""The build record: ``ptebuild.json`` in every output folder.

It says which program (or shim library) wrote each file, with the file's SHA-256 and size, so
that ``ptebuild verify`` can check the folder later and the loader can say which program a
``.ptd`` was built for. Format (JSON, keys sorted)::

    {"format": "ptebuild-record", "version": 1,
     "manifest": "manifests/robot.toml",
     "targets": {"policy_xnnpack": {"kind": "program", "backend": "xnnpack", "key": "...",
                                    "data_name": "policy_xnnpack_weights",
                                    "methods": ["encode_observation", "predict_actions"],
                                    "outputs": {"policy_xnnpack.pte": {"sha256": "...", "bytes": 75040},
                                                "policy_xnnpack_weights.ptd": {...}}}}}

A build updates the entries of the targets it built and keeps the others, so ``--only`` does
not forget the rest of the folder. Written atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ptebuild.errors import BuildError
from ptebuild.manifest.plan import RECORD_NAME

FORMAT = "ptebuild-record"
VERSION = 1


def read_record(out_dir: Path) -> dict:
    """The record in ``out_dir``; an empty one when there is none. Raises BuildError if unreadable."""
    path = out_dir / RECORD_NAME
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"format": FORMAT, "version": VERSION, "targets": {}}
    except (OSError, ValueError) as exc:
        raise BuildError(f"{path}: not a readable build record ({exc}); delete it and build again") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("targets"), dict):
        raise BuildError(f"{path}: not a ptebuild build record; delete it and build again")
    return data


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder (fsync + rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def update_record(out_dir: Path, manifest: str, entries: dict[str, dict]) -> None:
    record = read_record(out_dir)
    record["manifest"] = manifest
    record["targets"].update(entries)
    text = json.dumps(record, sort_keys=True, indent=1) + "\n"
    write_atomically(out_dir / RECORD_NAME, text.encode())
