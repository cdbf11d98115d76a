"""One line per cause (ptebuild.causes): real error texts from torch, ExecuTorch and AOTInductor."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ptebuild.causes import MAX_ITEMS, describe, summary
from ptebuild.errors import BuildError


def _cpp_exception_text() -> str:
    """A real c10::Error's text with its C++ backtrace (as the GPU machine's runtime error had)."""
    code = "import torch\ntry:\n    torch.empty(-1)\nexcept RuntimeError as e:\n    print(str(e), end='')"
    env = {**os.environ, "TORCH_SHOW_CPP_STACKTRACES": "1", "TORCH_DISABLE_ADDR2LINE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout


def test_a_cpp_exception_keeps_its_first_line_not_its_frames():
    text = _cpp_exception_text()
    assert "Exception raised from" in text and text.count("\n") > 5  # the noise is really there
    assert summary(text) == "Trying to create tensor with negative dimension -1: [-1]"


def test_a_list_after_a_colon_keeps_its_items():
    # ExecuTorch 1.5.1's AOTI missing-kernel message (the real one: tests/builder/test_failure_logs.py).
    text = ("Method forward missing fallback kernels (2 total):\n  - aten::_upsample_bilinear2d_aa\n"
            "  - aoti_torch_cuda_index_put_out\nPlease add them to the AOTI backend.")
    assert summary(text) == ("Method forward missing fallback kernels (2 total): aten::_upsample_bilinear2d_aa, "
                             "aoti_torch_cuda_index_put_out")


def test_a_long_list_is_cut_with_a_count():
    text = "unsupported operators:\n" + "\n".join(f"- aten::op{i}.default" for i in range(20))
    line = summary(text)
    assert line.endswith(f"aten::op{MAX_ITEMS - 1}.default and {20 - MAX_ITEMS} more")


def test_a_leading_blank_line_and_advice_after_the_cause():
    # torch.export's SpecViolationError starts with a newline, then gives advice.
    text = "\nOperator torch._ops.aten.histc.default is not in Core ATen opset.\nThere are a few things to try:\n1. ..."
    assert summary(text) == "Operator torch._ops.aten.histc.default is not in Core ATen opset."


@pytest.mark.parametrize("text, line", [
    ("method->set_inputs() for method 'forward' failed with error 0x12", "method->set_inputs() for method 'forward' failed with error 0x12 (InvalidArgument)"),
    ("Failed to load method forward, error: 0x:14", "Failed to load method forward, error: 0x:14 (OperatorMissing)"),
], ids=["set-inputs", "load-method"])
def test_executorch_error_codes_are_named(text, line):
    assert summary(text) == line


def test_describe_gives_the_type_and_the_whole_text():
    try:
        try:
            raise RuntimeError("tensor does not have a device\nException raised from x at y:1\nframe #0: z")
        except RuntimeError as inner:
            raise BuildError("lowering for portable failed: RuntimeError: tensor does not have a device") from inner
    except BuildError as exc:
        cause = describe(exc)
        plain = describe(exc.__cause__)
    assert cause.line == "lowering for portable failed: RuntimeError: tensor does not have a device"
    assert "frame #0: z" in cause.text and "direct cause" in cause.text
    assert plain.line == "RuntimeError: tensor does not have a device"
    assert describe(ValueError()).line == "ValueError"


def test_chain_walks_causes_and_contexts_once_each():
    from ptebuild.causes import chain

    try:
        try:
            try:
                raise KeyError("inner")
            except KeyError as inner:
                raise ValueError("middle") from inner
        except ValueError:
            raise RuntimeError("outer")  # a context, not a cause
    except RuntimeError as exc:
        assert [type(e).__name__ for e in chain(exc)] == ["RuntimeError", "ValueError", "KeyError"]
        loop = ValueError("loop")
        loop.__cause__ = loop
        assert list(chain(loop)) == [loop]
