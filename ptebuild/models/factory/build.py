"""The ``factory`` kind's build of one program: the model made by its callable (or kept from the
worker's last task), each method exported and lowered with the backend's hooks
(:func:`~ptebuild.models.factory.lower.lower`), checked against eager PyTorch by the backend's own
check, a wrong program located (:mod:`.divergence`), and its test cases bundled (``.bpte``).

Runs in a worker (imports torch and executorch); the framing every kind shares is the worker's
(:func:`ptebuild.worker.execute.run_task`).
"""

from __future__ import annotations

import time
from pathlib import Path

from ptebuild.errors import BuildError
from ptebuild.figures import as_figures
from ptebuild.insight.stages import Stage
from ptebuild.models.base import BuildJob, BuiltProgram


def build_program(job: BuildJob) -> BuiltProgram:
    """Lower, check and bundle ``job.program``; its files go through ``job.outputs``."""
    import torch

    from ptebuild.backends import bound_backend
    from ptebuild.lowering.check import WrongProgram
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.lowering.known_limits import explained
    from ptebuild.lowering.samples import load_program_samples
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower, store_stream

    program, progress, stages = job.program, job.progress, job.stages
    started = time.monotonic()
    stages.begin(Stage.IMPORT)
    kept = job.kept
    if kept is None:
        progress("building the model")
        model = build_model(program, job.manifest_dir, job.display)
        kept = job.keep(model) if job.keep is not None else None
    else:
        model = kept.model
        torch.set_rng_state(kept.rng)  # as just after building it
    samples = load_program_samples(program, job.manifest_dir, job.display)
    inputs = {m.name: make_inputs(m, program.seed) for m in program.methods}
    folder = job.folder or Path(".")
    lowered = lower(model, program, inputs, folder, progress, job.store, samples,
                    exports=kept.exports if kept is not None else None, stages=stages)
    stored = getattr(job.outputs, "program", None)
    if stored is not None:  # the worker's outputs: the files it hands the builder when the check begins
        stored.outputs.update(lowered.outputs)
        stored.files.update(lowered.files)
    lowered_at = time.monotonic()
    figures, check_name = [], ""
    backend = bound_backend(program).backend
    if program.check_enabled:
        kind = backend.check_kind(program.options)
        # the worker's progress begins the check's stage at this line (and hands over the stored files)
        progress("checking against eager PyTorch" if kind.numeric else f"checking its structure ({kind.name}: nothing is run)")
        ptd = lowered.files.get(program.ptd_name) if program.ptd_name else None
        try:
            checked, check_name = backend.check(model, program, lowered.files[program.pte_name], ptd, samples)
        except WrongProgram as wrong:  # where does it first diverge from eager PyTorch?
            from ptebuild.models.factory.divergence import locate

            raise locate(wrong, model, program, inputs, samples, progress) from None
        except BuildError as error:  # a known limit of the toolchain, said so
            again = explained(error, program.backend)
            if again is error:
                raise
            raise again from error
        figures = [as_figures(f) for f in checked]
    if program.bpte_name:
        from ptebuild.lowering.bundled_io import write_bpte

        stages.begin(Stage.BUNDLE)
        progress("bundling the test cases")
        reference = backend.reference_model(model, program)  # what the check holds it to
        pte = lowered.files[program.pte_name]
        bpte = store_stream(job.store, program.bpte_name, lambda out: write_bpte(reference, program, pte, out, samples))
        path = lowered.add(bpte, job.store, folder)
        if stored is not None:
            stored.outputs[bpte.name], stored.files[bpte.name] = bpte, path
    return BuiltProgram(
        files=dict(lowered.files),
        delegated=dict(lowered.delegated),
        figures=figures,
        check=check_name,
        lower_seconds=lowered_at - started,
        check_seconds=time.monotonic() - lowered_at,
        insight=lowered.insight.worker_part() if lowered.insight is not None else None,
        warnings=tuple(lowered.warnings),
    )
