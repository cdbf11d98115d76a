"""Transposed convolutions for ExecuTorch 1.5.1's CUDA backend, as the convolutions they equal
(:mod:`ptebuild.backends.cuda.conv_transpose`).

On any machine: the rewrite of an exported graph computes what eager PyTorch computes, for 1-D and
2-D transposed convolutions with strides, paddings, output paddings, groups, with and without
bias, batched or not; what it does not cover (dilation, 3-D) is left alone. On the GPU machine
(``gpu`` marker): a model with ``ConvTranspose1d`` and ``ConvTranspose2d`` builds for CUDA
(before: "NoValidChoicesError ... max_autotune_conv_backends") and its compiled code matches
eager PyTorch on the GPU; the fix is named in the key and the build record.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

from ptebuild.backends.cuda.conv_transpose import FIX, rewrite

HERE = Path(__file__).resolve().parent


class Wrap(nn.Module):
    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x)


def _cases():
    for stride, padding, output_padding, groups, kernel, bias in itertools.product(
        (1, 2, 3), (0, 1, 2), (0, 1), (1, 2), (1, 3, 4), (True, False)
    ):
        if output_padding >= stride or (kernel * 7 + stride * 5 + padding * 3 + groups + output_padding * 11 + bias) % 19:
            continue  # a spread over the combinations, not all of them
        yield nn.ConvTranspose2d(4, 6, kernel, stride, padding, output_padding, groups, bias), torch.randn(2, 4, 5, 7)
        yield nn.ConvTranspose1d(4, 6, kernel, stride, padding, output_padding, groups, bias), torch.randn(2, 4, 9)
    yield nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0)), torch.randn(1, 4, 5, 5)
    yield nn.ConvTranspose1d(4, 6, 3, stride=2), torch.randn(4, 9)  # unbatched


CASES = list(_cases())


@pytest.mark.parametrize("conv, x", CASES, ids=[f"{type(c).__name__}-{i}" for i, (c, _) in enumerate(CASES)])
def test_the_rewritten_graph_computes_what_eager_does(conv, x):
    torch.manual_seed(0)
    model = Wrap(conv).eval()
    module = torch.export.export(model, (x,), strict=False).module()
    assert rewrite(module) == 1
    again = torch.export.export(module, (x,), strict=False)
    assert not [n for n in again.graph.nodes if "conv_transpose" in str(n.target)]
    with torch.no_grad():
        expected, actual = model(x), again.module()(x)
    assert actual.shape == expected.shape
    assert torch.allclose(actual, expected, atol=1e-5, rtol=1e-5)


def test_what_the_fix_does_not_cover_is_left_alone():
    for conv, x in ((nn.ConvTranspose2d(3, 3, 3, dilation=2), torch.randn(1, 3, 6, 6)),
                    (nn.ConvTranspose3d(2, 2, 3), torch.randn(1, 2, 4, 4, 4)),
                    (nn.Conv2d(3, 3, 3), torch.randn(1, 3, 6, 6))):
        module = torch.export.export(Wrap(conv).eval(), (x,), strict=False).module()
        assert rewrite(module) == 0


def test_the_fix_is_named_in_every_cuda_programs_key():
    from ptebuild.backends import get_backend

    assert get_backend("cuda").toolchain_facts({})["cuda.fixes"] == FIX


@pytest.mark.gpu
def test_on_the_gpu_a_transposed_convolution_builds_and_float32_attention_is_explained(tmp_path):
    """On the GPU machine. Before the fix the upsampler failed: "lowering for cuda failed: InductorError:
    LoweringException: NoValidChoicesError: No choices to select ... consider adding ATEN into
    max_autotune_conv_backends"; float32 attention failed "RuntimeError: Expected bfloat16 inputs" alone."""
    from gpu_build import build_cli

    shutil.copy(HERE / "known_limits_cuda.toml", tmp_path / "known_limits_cuda.toml")
    shutil.copytree(HERE / "cudamodels", tmp_path / "cudamodels", ignore=shutil.ignore_patterns("__pycache__"))
    done = build_cli(tmp_path / "known_limits_cuda.toml", tmp_path / "out", tmp_path / "cache", "--keep-going")
    print(json.dumps(done, indent=1)[:8000])  # the figures, for the lead's note (-s shows them)
    programs = {p["name"]: p for p in done["report"]["targets"]}
    upsampler = programs["upsampler_cuda"]
    assert upsampler["status"] == "built", upsampler.get("message")
    assert upsampler["check"] == "aoti-runner-cuda"
    assert {f["sizes"]["batch"] for f in upsampler["figures"]} == {1, 2, 3}
    assert all(f["max_abs_error"] < 1e-3 and f["cosine"] > 0.9999 for f in upsampler["figures"])
    record = json.loads((tmp_path / "out" / "ptebuild.json").read_text())
    assert record["targets"]["upsampler_cuda"]["inputs"]["toolchain.cuda.fixes"] == FIX
    attention = programs["attention_cuda"]
    assert attention["status"] == "failed" and "Expected bfloat16 inputs; known limit of ExecuTorch 1.5.1's CUDA backend: " \
        "its attention kernel" in attention["message"], attention.get("message")
    assert "\n" not in attention["message"]
