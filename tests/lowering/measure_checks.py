"""The figures behind issue 26's closing note, measured in this process (not a test):

    .venv/bin/python tests/lowering/measure_checks.py [calibration] [orders]

- ``calibration``: the int8 classifier of ``tests/manifests/checks.toml`` lowered twice, calibrated
  on generated N(0, 1) inputs and on its samples; on 64 readings, the share whose top class agrees
  with eager PyTorch's and the accuracy against their true classes;
- ``orders``: the static int8 XNNPACK policy (batch 1..4) without and with the fix for XNNPACK's
  quantized mean: each order of batch sizes on one freshly loaded program, the max error of each
  run against eager PyTorch.

The half-precision, degenerate and torchvision-like figures come from ``ptebuild build
tests/manifests/checks.toml --json`` (the ``check`` and ``checked`` of each program).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"


def lowered(manifest: Path, name: str, staging: Path, samples: bool = True):
    from ptebuild.lowering.check import native_stderr_silenced
    from ptebuild.lowering.examples import make_inputs
    from ptebuild.lowering.samples import load_program_samples
    from ptebuild.manifest.load import load_manifest
    from ptebuild.models.factory.loading import build_model
    from ptebuild.models.factory.lower import lower

    plan = load_manifest(manifest)
    program = next(p for p in plan.programs if p.name == name)
    model = build_model(program, manifest.parent, str(manifest))
    found = load_program_samples(program, manifest.parent, str(manifest)) if samples else {}
    with native_stderr_silenced():
        files = lower(model, program, {m.name: make_inputs(m, program.seed) for m in program.methods}, staging,
                      lambda _: None, samples=found)
    return program, model, files.files[program.pte_name]


def calibration(manifest: Path, work: Path) -> None:
    import torch
    from executorch.runtime import Runtime

    for calibrated in ("noise", "samples"):
        _, model, pte = lowered(manifest, "classifier_int8", work / calibrated, samples=calibrated == "samples")
        from checkmodels import readings

        x, labels = readings(64, seed=99)
        method = Runtime.get().load_program(pte).load_method("forward")
        found = torch.cat([method.execute([batch])[0].argmax(-1) for batch in x.split(8)])
        with torch.no_grad():
            eager = model(x).argmax(-1)
        agree = float((found == eager).double().mean())
        accuracy = float((found == labels).double().mean())
        print(f"classifier_int8 calibrated on {calibrated:7s}: top-1 agrees with eager on {agree:.1%} of 64 samples, "
              f"accuracy {accuracy:.1%} (eager {float((eager == labels).double().mean()):.1%})")


def orders(manifest: Path, work: Path) -> None:
    import torch
    from executorch.runtime import Runtime

    from ptebuild.backends.xnnpack import XnnpackBackend
    from ptebuild.lowering.check import flatten_outputs
    from ptebuild.lowering.examples import flat_inputs, make_inputs

    fix = XnnpackBackend.workarounds
    for label in ("without the fix", "with the fix"):
        if label == "without the fix":
            XnnpackBackend.workarounds = lambda self, options, program: {}  # type: ignore[method-assign]
        else:
            XnnpackBackend.workarounds = fix  # type: ignore[method-assign]
        program, model, pte = lowered(manifest, "policy_int8", work / label.replace(" ", "-"))
        method = program.methods[0]
        for order in ((4, 1), (1, 4), (2, 1, 4), (1, 2, 4), (4, 2, 1), (1, 1, 4, 4)):
            executable = Runtime.get().load_program(pte).load_method("forward")
            errors = []
            for batch in order:
                inputs = make_inputs(method, program.seed, {"batch": batch})
                actual = flatten_outputs(list(executable.execute(flat_inputs(inputs))))[0]
                with torch.no_grad():
                    errors.append(f"{batch}:{float((actual - model(*inputs)).abs().max()):.4f}")
            print(f"policy_int8 {label:15s} order {' -> '.join(map(str, order)):13s} max error per run {' '.join(errors)}")
    XnnpackBackend.workarounds = fix  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    chosen = argv or ["calibration", "orders"]
    with tempfile.TemporaryDirectory(prefix="measure-checks-") as folder:
        root = Path(folder)
        shutil.copy(MANIFESTS / "checks.toml", root / "checks.toml")
        shutil.copytree(MANIFESTS / "checkmodels", root / "checkmodels", ignore=shutil.ignore_patterns("__pycache__"))
        sys.path.insert(0, str(root))
        for name in chosen:
            {"calibration": calibration, "orders": orders}[name](root / "checks.toml", root)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
