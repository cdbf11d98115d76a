"""A tiny project for the Core ML and Vulkan backends' tests, and its build (one per session).

``duo`` has two methods with a dynamic batch (1..4): ``encode`` (Linear, ReLU, Linear) and
``decode`` (a batched matmul, Linear, tanh). The manifest builds it for Core ML (weights inside the delegate) and
for Vulkan (weights in ``duo_vulkan_weights.ptd``). Imported by bare name (``tests/`` is on
``sys.path``); the build runs the real command line (:func:`helpers.build_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

MODEL = '''\
import torch
from torch import nn


class Duo(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width))
        self.head = nn.Linear(width, 4)

    def encode(self, x):
        return self.encoder(x)

    def decode(self, h):
        # A batched matmul: ExecuTorch's re-tracing narrows a batch of min 1 to 2 here (Core ML).
        q = h.reshape(h.shape[0], 4, 4)
        return torch.tanh(self.head((q @ q.transpose(-1, -2)).reshape(h.shape[0], 16)))


def make_duo(width: int = 16):
    return Duo(width)
'''

MANIFEST = '''\
[defaults]
out = "out"

[models.duo]
factory = "duomodels.duo:make_duo"
seed = 7
dims = { batch = { min = 1, max = 4 } }

[models.duo.methods.encode]
inputs = [{ name = "x", shape = ["batch", 8] }]

[models.duo.methods.decode]
inputs = [{ name = "h", shape = ["batch", 16] }]

[programs.duo_coreml]
model = "duo"
backend = "coreml"

[programs.duo_vulkan]
model = "duo"
backend = "vulkan"
data_name = "duo_vulkan_weights"
'''

SEED = 7


@dataclass(frozen=True)
class MobileBuild:
    manifest: Path
    out: Path
    report: dict

    def program(self, name: str) -> dict:
        return next(p for p in self.report["targets"] if p["name"] == name)

    def digests(self, name: str) -> dict[str, str]:
        return {Path(o["path"]).name: o["sha256"] for o in self.program(name)["outputs"]}


def write_project(folder: Path) -> Path:
    """The project (model package and manifest) in ``folder``; returns the manifest."""
    package = folder / "duomodels"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "duo.py").write_text(MODEL)
    manifest = folder / "mobile.toml"
    manifest.write_text(MANIFEST)
    return manifest


def build(folder: Path, *args: str, env: dict | None = None) -> MobileBuild:
    """``ptebuild build`` of the project in a new ``folder`` (its own cache unless ``args`` say)."""
    from helpers import build_json

    manifest = write_project(folder)
    flags = list(args) if "--no-cache" in args else ["--cache", str(folder / "cache"), *args]
    code, report = build_json(manifest, *flags, env=env)
    assert code == 0, report
    return MobileBuild(manifest, folder / "out", report)


def make_model():
    """The eager model, as the build makes it (the factory under the manifest's seed)."""
    import importlib.util
    import sys
    import tempfile

    import torch

    folder = Path(tempfile.mkdtemp(prefix="duo-"))
    write_project(folder)
    spec = importlib.util.spec_from_file_location("duo_eager", folder / "duomodels" / "duo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["duo_eager"] = module
    spec.loader.exec_module(module)
    torch.manual_seed(SEED)
    return module.make_duo().eval()
