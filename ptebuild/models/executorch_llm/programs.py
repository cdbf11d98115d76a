"""What the ``executorch-llm`` kind's builder side and worker side share: which backends take
which route, the files a program writes, the token agreement its check asks. Imports nothing
heavy (no torch, no executorch, no pydantic).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ptebuild.plan import ProgramPlan

PTEBUILD_LOWERED_BACKENDS = ("cuda",)
"""Backends its LLM export lacks, lowered by ptebuild's own backend from upstream's exported model."""
GENERATION_CHECKED_BACKENDS = ("portable", "xnnpack", "openvino")
"""Backends whose programs ExecuTorch's pip runtime runs here: checked by generation and in the
runner. The others are checked by their backend's own check (Vulkan and Core ML: structural;
CUDA: on the GPU)."""
FLOAT_TOKEN_AGREEMENT = 1.0
QUANTIZED_TOKEN_AGREEMENT = 0.5


def tokenizer_output(program_name: str, tokenizer: str) -> str:
    """The file name of a program's tokenizer in the output folder: ``<program>.<tokenizer's file name>``."""
    return f"{program_name}.{Path(tokenizer).name}"


def data_file_names(program: ProgramPlan) -> list[str]:
    """The ``.ptd`` files a program loads: its ``data_name``'s, then its adapter's (a LoRA program)."""
    return [name for name in (program.ptd_name, *program.extra_outputs) if name and name.endswith(".ptd")]


def token_agreement_floor(program: ProgramPlan) -> float:
    """The least share of decode steps whose token must agree with the eager model's."""
    if program.min_token_agreement is not None:
        return program.min_token_agreement
    options = program.options
    quantized = options.get("qmode") or options.get("embedding_quantize") or options.get("quantize_kv_cache")
    return QUANTIZED_TOKEN_AGREEMENT if quantized else FLOAT_TOKEN_AGREEMENT
