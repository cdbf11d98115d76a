"""Which of ExecuTorch's example models ptebuild builds, and how: one manifest per selection."""

from __future__ import annotations

import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> the method's inputs, as ExecuTorch's examples give them (get_example_inputs()).
MODELS = {
    "mul": '[{ name = "input", shape = [3, 2] }, { name = "other", shape = [3, 2] }]',
    "linear": '[{ name = "arg", shape = [3, 3] }]',
    "add": '[{ name = "x", shape = [1] }, { name = "y", shape = [1] }]',
    "add_mul": '[{ name = "a", shape = [2, 2] }, { name = "x", shape = [2, 2] }, { name = "b", shape = [2, 2] }]',
    "softmax": '[{ name = "x", shape = [2, 2] }]',
    "conv1d": '[{ name = "x", shape = [1, 3, 10] }]',
    "sdpa": ('[{ name = "query", shape = [2, 8, 128, 64], dtype = "bfloat16" }, '
             '{ name = "key", shape = [2, 8, 128, 64], dtype = "bfloat16" }, '
             '{ name = "value", shape = [2, 8, 128, 64], dtype = "bfloat16" }]'),
    "lstm": ('[{ name = "x", shape = [5, 3, 10] }, '
             '{ name = "hidden", items = [{ name = "h0", shape = [2, 3, 20] }, { name = "c0", shape = [2, 3, 20] }] }]'),
    "deep_autoencoder": '[{ name = "x", shape = [1, 640] }]',
    "ds_cnn": '[{ name = "x", shape = [1, 1, 49, 10] }]',
    "mobilenet_v1_025": '[{ name = "x", shape = [1, 3, 96, 96] }]',
    "resnet8": '[{ name = "x", shape = [1, 3, 32, 32] }]',
}
VARIANTS = {
    "portable": 'backend = "portable"',
    "xnnpack": 'backend = "xnnpack"',
    "xnnpack_int8": 'backend = "xnnpack"\noptions = { quantize = "int8" }',
}


def write_project(folder: Path, programs: list[tuple[str, str]]) -> Path:
    """A manifest building ``(model, variant)`` pairs, with the adapter beside it; its path."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "etmodels.py", folder / "etmodels.py")
    lines = ['[defaults]', 'out = "out"', '']
    for model in sorted({m for m, _ in programs}):
        lines += [f'[models.{model}]', 'factory = "etmodels:make"', f'kwargs = {{ name = "{model}" }}', 'seed = 7',
                  f'methods.forward.inputs = {MODELS[model]}', '']
    for model, variant in programs:
        lines += [f'[programs.{model}_{variant}]', f'model = "{model}"', VARIANTS[variant], '']
    path = folder / "corpus.toml"
    path.write_text("\n".join(lines))
    return path
