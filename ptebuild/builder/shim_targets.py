"""Shim import libraries as build targets: written in-process (pure Python, milliseconds)."""

from __future__ import annotations

import shutil
from pathlib import Path

from ptebuild.atomic import write_atomically
from ptebuild.builder import keys
from ptebuild.builder.outdir import OutputFolder
from ptebuild.hashing import hash_file
from ptebuild.plan import BuildPlan, ShimPlan
from ptebuild.results import ActionResult, OutputFile


def shim_inputs(shim: ShimPlan, plan: BuildPlan, digest_file: keys.DigestFile) -> dict[str, str]:
    return keys.shim_inputs(shim, plan, digest_file)


def write_shims(shim: ShimPlan, plan: BuildPlan, key: str, inputs: dict[str, str], folder: OutputFolder) -> tuple[ActionResult, dict[str, Path]]:
    """Write the import library into a staging folder; return its result and staged file."""
    from ptebuild.shims import load_shim_list, write_import_library

    shims = load_shim_list(Path(plan.manifest_dir, shim.source))
    data = write_import_library(shims, fmt=shim.format, keep_order=shim.keep_order)
    staging = folder.stage(shim.name)
    staged = staging / shim.lib_name
    try:
        write_atomically(staged, data)
        digest, size = hash_file(staged)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    result = ActionResult(
        key=key, target=shim.name, kind="shims", outputs=(OutputFile(shim.lib_name, digest, size),), inputs=inputs
    )
    return result, {shim.lib_name: staged}
