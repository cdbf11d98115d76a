"""What ExecuTorch's native LLM runner needs and prints: its kernels registered in this process,
and its file descriptor 1 (where it prints what it generates and its stats) sent to stderr or
captured, with the pieces it prints for each token (:func:`printed`).

The runner and the method need ExecuTorch's LLM kernels registered in this process
(``executorch.extension.llm.custom_ops.custom_ops``: ``llama::custom_sdpa``, ``update_cache``;
``executorch.kernels.quantized``: quantized embeddings), imported by :func:`register_llm_kernels`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


def register_llm_kernels() -> None:
    """Register ExecuTorch's LLM operators (custom SDPA, KV-cache update, quantized embeddings) in
    this process: the runtime resolves a program's operators when its method is loaded. Also
    imports the runner, quietly: its tokenizers announce themselves on stderr when loaded."""
    import ctypes

    from ptebuild.lowering.check import native_stderr_silenced

    with native_stderr_silenced():
        import executorch.extension.llm.custom_ops.custom_ops
        import executorch.extension.llm.runner
        import executorch.kernels.quantized  # noqa: F401

        ctypes.CDLL(None).fflush(None)  # what C's stdio buffered goes out now, silenced


@contextlib.contextmanager
def _fd1_to(target: int) -> Iterator[None]:
    """File descriptor 1 pointed at ``target`` while the block runs; what C's buffers hold (the
    runner's and its tokenizer's prints) flushed there before it is pointed back."""
    import ctypes
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(target, 1)
    try:
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def runner_stdout_to_stderr() -> Iterator[None]:
    """The runner prints what it generates and its stats ("PyTorchObserver {...}") on file
    descriptor 1, which is a report's channel (``--json``, an executor's pipe): send it to fd 2
    while it runs (where :func:`~ptebuild.lowering.check.runtime_log` collects it)."""
    with _fd1_to(2):
        yield


class Printed:
    """What a runner printed on file descriptor 1 while :func:`runner_stdout_captured` ran."""

    def __init__(self) -> None:
        self.output = b""

    @property
    def text(self) -> bytes:
        """The generated text: what the runner printed before its closing newline and its stats line
        (``text_llm_runner.cpp``: ``printf("\\n")``, then ``PyTorchObserver {...}``)."""
        end = self.output.rfind(b"PyTorchObserver {")
        text = self.output[:end] if end >= 0 else self.output
        return text[:-1] if text.endswith(b"\n") else text


@contextlib.contextmanager
def runner_stdout_captured() -> Iterator[Printed]:
    """Collect what the runner prints on file descriptor 1 (the pieces it generates, its stats) into
    a temporary file, read into the yielded :class:`Printed` when the block ends."""
    import tempfile

    printed = Printed()
    with tempfile.TemporaryFile() as file:
        try:
            with _fd1_to(file.fileno()):
                yield printed
        finally:
            file.seek(0)
            printed.output = file.read()


def printed(piece: bytes) -> bytes:
    """What ExecuTorch's runner prints for a piece (``llm::safe_printf``): nothing for a piece of one
    byte that is neither printable ASCII nor whitespace (a byte-level piece of part of a character,
    a control code), else the piece up to a NUL byte (``printf("%s")``)."""
    if len(piece) == 1 and not (0x20 <= piece[0] <= 0x7E or piece[0] in b"\t\n\v\f\r"):
        return b""
    return piece.split(b"\0", 1)[0]


def emitted_tokens(stats: list[Any]) -> int:
    """How many tokens the runner emitted: the prefill's, then those its stats count as generated."""
    import json

    return 1 + int(json.loads(stats[0].to_json_string()).get("generated_tokens", 0)) if stats else 0
