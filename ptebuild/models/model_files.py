"""What the model kinds that read files of their own (a params JSON, a checkpoint, a tokenizer)
check of them when a manifest is resolved: each file there, and a tokenizer whose name can be
written beside a program. Imports nothing heavy."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_model_files(spec: Any, fixes: dict[str, str], *, display: str, model_name: str, manifest_dir: Path,
                      offline: bool) -> None:
    """Each of ``fixes``' fields of ``spec`` that names a file names one that is there (not
    ``offline``: a release bundle's copy of the manifest has none of them), and its ``tokenizer``'s
    file name can be written beside a program as ``<program>.<file name>``. Raises ManifestError at
    ``models.NAME.FIELD`` with the field's fix."""
    from ptebuild.errors import ManifestError
    from ptebuild.names import name_problem
    from ptebuild.path_problems import describe, file_problem

    for field, fix in fixes.items():
        path = getattr(spec, field)
        if path is None or offline:
            continue
        problem = file_problem(manifest_dir / path)
        if problem:
            raise ManifestError(f"{display}: models.{model_name}.{field}: {describe(path, problem)}; {fix}")
    problem = name_problem(Path(spec.tokenizer).name, extension=".pte")
    if problem:
        raise ManifestError(
            f"{display}: models.{model_name}.tokenizer: its file name {Path(spec.tokenizer).name!r} {problem} "
            "(it is written beside each program as <program>.<file name>)"
        )
