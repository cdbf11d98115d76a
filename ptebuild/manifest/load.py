"""Read a TOML manifest, validate it and resolve it into a :class:`BuildPlan`.

Every problem raises :class:`ManifestError` with one line that starts with the manifest's path,
then the dotted location (``programs.policy_xnnpack.backend``), what is wrong and how to fix it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from ptebuild.errors import ManifestError
from ptebuild.manifest.locations import describe_validation_error, dotted  # noqa: F401 - re-exported
from ptebuild.plan import BuildPlan

_TOML_POSITION = re.compile(r"^(?P<msg>.*?) \(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def read_toml(path: Path, display: str) -> dict[str, Any]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{display}: no such file; give the path of a .toml manifest") from None
    except IsADirectoryError:
        raise ManifestError(f"{display}: is a folder; give the path of a .toml manifest") from None
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{display}: not UTF-8 text (byte {exc.start}); save the manifest as UTF-8") from None
    except OSError as exc:
        raise ManifestError(f"{display}: cannot read: {exc.strerror}; give a manifest you can read") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_POSITION.match(str(exc))
        if match:
            raise ManifestError(
                f"{display}:{match['line']}:{match['col']}: TOML syntax error: {match['msg']}; correct the TOML there"
            ) from None
        raise ManifestError(f"{display}: TOML syntax error: {exc}; correct the TOML there") from None


def load_manifest(path: str | Path) -> BuildPlan:
    """Read, validate and resolve the manifest at ``path``.

    Imports pydantic, never torch. Raises :class:`ManifestError` (or its subclass
    :class:`DataNameError` for bad or colliding output names).
    """
    from pydantic import ValidationError

    from ptebuild.manifest.resolve import resolve
    from ptebuild.manifest.schema import Manifest

    display = str(path)
    path = Path(path)
    data = read_toml(path, display)
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(describe_validation_error(exc, display, Manifest)) from None
    return resolve(manifest, display=display, manifest_dir=path.resolve().parent)


def load_manifest_text(text: str, display: str) -> BuildPlan:
    """Validate and resolve a manifest given as text, away from its project (a release bundle's
    copy): its factory modules and shim lists are not looked for (:func:`resolve`'s ``offline``).

    Raises :class:`ManifestError` as :func:`load_manifest` does.
    """
    from pydantic import ValidationError

    from ptebuild.manifest.resolve import resolve
    from ptebuild.manifest.schema import Manifest

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{display}: TOML syntax error: {exc}; correct the TOML there") from None
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as exc:
        raise ManifestError(describe_validation_error(exc, display, Manifest)) from None
    return resolve(manifest, display=display, manifest_dir=Path(display).parent, offline=True)
