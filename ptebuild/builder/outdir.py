"""The output folder: who owns its files, staging, atomic publishing, the build record.

Files are staged in ``<out>/.ptebuild-staging/<pid>-<random>/`` (per process, so builders sharing
a folder never remove each other's work) and renamed into place with ``os.replace``: each output
appears whole or not at all, and never before its program passed its check.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from ptebuild import keyinputs
from ptebuild.backends import bound_backend
from ptebuild.builder.insight import InsightReader
from ptebuild.builder.runtime_support import Memo, RuntimeSupportReader
from ptebuild.errors import DataNameError, FormatError
from ptebuild.figures import CheckSummary
from ptebuild.names import case_key
from ptebuild.plan import BuildPlan, ProgramPlan
from ptebuild.processes import pid_alive
from ptebuild.results import ActionResult, OutputFile
from ptebuild.runtime.record import (
    RECORD_NAME,
    RecordEntry,
    bundled_io_entry,
    file_matches,
    read_build_record,
    update_record,
)

STAGING_DIR = ".ptebuild-staging"


def manifest_id(plan: BuildPlan, out_dir: Path) -> str:
    """How the build record names a manifest: its path relative to the output folder, so that a
    checkout moved as a whole keeps its identity."""
    manifest = Path(plan.manifest_dir, Path(plan.manifest).name)
    return Path(os.path.relpath(manifest, out_dir.resolve())).as_posix()


class OutputFolder:
    def __init__(self, plan: BuildPlan, path: Path, digest_file: Callable[[Path], tuple[str, int]],
                 memo: Memo | None = None) -> None:
        self.plan = plan
        self.path = path
        self.digest_file = digest_file
        self.manifest_id = manifest_id(plan, path)
        self._staging: Path | None = None
        self.entries: dict[str, RecordEntry] = {}
        self.runtime = RuntimeSupportReader(path, memo, digest_file)
        """A program's ``runtime`` entry, read from its files once per content (``memo``: the cache)."""
        self.insight = InsightReader(path, memo, digest_file)
        """A program's ``figures``: the action result's joined with its files' (read once per content)."""

    # -- ownership ------------------------------------------------------------------------------

    def check_ownership(self) -> None:
        """Refuse to write over what another manifest built here, and any output whose name
        equals, but for case, a file already there."""
        try:
            existing = {case_key(name): name for name in os.listdir(self.path)}
        except FileNotFoundError:
            return
        try:
            record = read_build_record(self.path)
        except FormatError:
            record = None  # rewritten by this build
        owners: dict[str, tuple[str, str | None]] = {}
        if record is not None:
            for built_by, entry in record.targets.items():
                for file_name in entry["outputs"]:
                    owners[file_name] = (built_by, entry.get("manifest"))
        plan = self.plan
        for target in list(plan.programs) + list(plan.shims):
            kind = "program" if isinstance(target, ProgramPlan) else "shim library"
            for name in target.output_names:
                other = existing.get(case_key(name))
                if other is not None and other != name:
                    raise DataNameError(
                        f"{plan.manifest}: {kind} {target.name!r} writes {name!r}, but {self.path} already has "
                        f"{other!r}, one file on macOS and Windows; choose names that differ in more than "
                        f"case, or remove {other!r}"
                    )
                owner, owner_manifest = owners.get(name, (None, None))
                if other == name and owner is not None and owner_manifest not in (None, self.manifest_id):
                    raise DataNameError(
                        f"{plan.manifest}: {kind} {target.name!r} writes {name!r}, but {self.path} has the "
                        f"{name!r} that {owner!r} of {owner_manifest} built (per {RECORD_NAME}); give one of "
                        f"them another name or output folder, or delete {name!r}"
                    )

    # -- staging and publishing -----------------------------------------------------------------

    def in_place(self, output: OutputFile) -> bool:
        """True if the folder already has ``output`` with its recorded bytes (stat-cached)."""
        return file_matches(self.path / output.name, output.sha256, output.size, self.digest_file)

    def missing(self, outputs: tuple[OutputFile, ...]) -> list[OutputFile]:
        return [o for o in outputs if not self.in_place(o)]

    def staging_root(self) -> Path:
        """This process's staging folder (created on first use)."""
        if self._staging is None:
            root = self.path / STAGING_DIR
            root.mkdir(exist_ok=True)
            self._staging = Path(tempfile.mkdtemp(dir=root, prefix=f"{os.getpid()}-"))
        return self._staging

    def stage(self, prefix: str) -> Path:
        """A new, empty folder inside this process's staging folder."""
        return Path(tempfile.mkdtemp(dir=self.staging_root(), prefix=f"{prefix}."))

    def publish(self, files: dict[str, Path]) -> None:
        """Rename staged files into the output folder: each one appears whole or not at all."""
        # The .ptd goes first: until the .pte is renamed too, the old .pte is still in place and
        # the SHA-256 weight keys make it refuse the new .ptd rather than run with wrong weights.
        for name in sorted(files, key=lambda n: n.endswith(".pte")):
            os.replace(files[name], self.path / name)

    def clean(self) -> None:
        """Remove this process's staging folder, those of processes that died, and the root if empty."""
        root = self.path / STAGING_DIR
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
        try:
            leftovers = list(root.iterdir())
        except OSError:
            return
        for folder in leftovers:
            pid = folder.name.split("-", 1)[0]
            if not pid.isdigit() or not pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
        try:
            root.rmdir()
        except OSError:
            pass  # another build is still staging there

    # -- the build record -----------------------------------------------------------------------

    def record(
        self,
        name: str,
        result: ActionResult,
        program: ProgramPlan | None = None,
        outputs: tuple[OutputFile, ...] | None = None,
        shared_data: str | None = None,
    ) -> None:
        """Note ``result`` as the build of target ``name`` (written by :meth:`write_record`);
        ``outputs``: the files as published, where they differ from the action's (a shared ``.ptd``).

        The entry keeps what release packaging needs later without the cache: the input
        breakdown (manifest entries, sources, weights, toolchain) and the discovered dependencies;
        a program's also the runtimes that load it, read from its files as published.
        """
        files = outputs or result.outputs
        summary = CheckSummary.of(result.figures) if result.kind == "program" else None
        runtime = insight = None
        if result.kind == "program":
            runtime = self.runtime.of(files, result.inputs.get(keyinputs.toolchain("executorch")))
            sharing = {o.name: tuple(sorted(p for p in self.plan.shared_data().get(program.data_name, ()) if p != name))
                       for o in files if o.name.endswith(".ptd") and program is not None and program.data_name}
            insight = self.insight.of(result.insight, files, sharing).to_json()
        self.entries[name] = RecordEntry(
            kind=result.kind,
            manifest=self.manifest_id,
            key=result.key,
            outputs=tuple((o.name, o.sha256, o.size) for o in files),
            inputs=dict(result.inputs),
            deps=result.deps.to_json(),
            backend=result.backend,
            check=result.check,
            data_name=program.data_name if program else None,
            methods=tuple(m.name for m in program.methods) if program else (),
            shared_data=shared_data,
            runtime=runtime,
            bundled_io=bpte_tolerance(program, result) if program and any(o.name.endswith(".bpte") for o in files) else None,
            checked=summary.to_json() if summary is not None else None,
            workarounds=bound_backend(program).backend.workarounds(program.options, program) or None if program else None,
            weights_in_pte=self._weights_in_pte(program, files),
            insight=insight,
        )

    def _weights_in_pte(self, program: ProgramPlan | None, files: tuple[OutputFile, ...]) -> tuple[dict[str, object], ...]:
        """The weights a program with a data name keeps inside its published ``.pte``."""
        if program is None or not program.data_name or not any(o.name == program.pte_name for o in files):
            return ()
        from ptebuild.runtime.weights_in_pte import weights_in_pte

        try:
            kept = weights_in_pte(self.path / program.pte_name, bound_backend(program).backend.code_in_named_data)
        except FormatError:
            return ()  # verify names a broken file; the record keeps what it can
        return tuple(w.to_json() for w in kept)

    def write_record(self) -> None:
        if self.entries:
            update_record(self.path, self.plan.manifest, self.entries)

    def remove_if_empty(self) -> None:
        """Remove the output folder (and ``.ptebuild/`` in it) when nothing is in them: a build that
        made the folder and wrote nothing (every program refused) leaves none behind."""
        for folder in (self.path / ".ptebuild", self.path):
            try:
                folder.rmdir()  # only when empty
            except FileNotFoundError:
                continue
            except OSError:
                return


def bpte_tolerance(program: ProgramPlan, result: ActionResult) -> dict[str, float]:
    """How a device verifies the program's ``.bpte``: from the largest error its check measured
    (:func:`~ptebuild.runtime.record.bundled_io_entry`)."""
    summary = CheckSummary.of(result.figures)
    return bundled_io_entry(program.atol, summary.max_abs_error if summary is not None else None)
