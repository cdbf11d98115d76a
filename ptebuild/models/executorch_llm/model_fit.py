"""A language model's own files (params, checkpoint) that upstream's model cannot be made from,
explained as the manifest key that names them.

ExecuTorch's LLM export makes the model in ``examples/models/llama/model.py`` (``Llama2Model``'s
constructor: the params, the checkpoint loaded with ``mmap``, ``load_state_dict``) and reads the
checkpoint's dtype in ``examples/models/checkpoint.py``. An exception raised there is a misfit of
what the manifest named: the checkpoint (missing or unexpected weights, not a ``torch.save`` zip,
not a state dict) or, without one, the params. :func:`explain_model_files` gives the located
:class:`~ptebuild.errors.ManifestError` (exit 2, as a factory model's ``weights`` that do not fit);
a failure elsewhere gives None and is reported as the export's. Imports nothing heavy.
"""

from __future__ import annotations

import traceback
from pathlib import PurePath

from ptebuild.causes import chain, describe
from ptebuild.errors import ManifestError
from ptebuild.models.executorch_llm.spec import LlmModelSpec

MAKERS = (("examples/models/llama/model.py", "__init__"), ("examples/models/checkpoint.py", ""))
"""Upstream's code that makes the model from its files: (file path's end, function or any)."""


def _made_the_model(exc: BaseException) -> bool:
    for current in chain(exc):
        for frame in traceback.extract_tb(current.__traceback__):
            path = PurePath(frame.filename).as_posix()
            if any(path.endswith(end) and (not name or frame.name == name) for end, name in MAKERS):
                return True
    return False


def explain_model_files(exc: BaseException, spec: LlmModelSpec, model: str) -> ManifestError | None:
    """The ManifestError for ``exc`` raised while upstream made ``model`` from its files, else None."""
    if spec.huggingface is not None or not _made_the_model(exc):
        return None
    cause = describe(exc).line
    model_class = spec.model_class or "llama3"
    if spec.checkpoint is not None:
        return ManifestError(
            f"{spec.checkpoint!r} does not fit the model ({spec.params}, model_class {model_class}): {cause}; give a "
            "checkpoint in ExecuTorch's Llama layout for these params (a torch.save'd state dict: tok_embeddings.weight, "
            "layers.0.attention.wq.weight...; a Hugging Face model goes in huggingface instead)",
            location=f"models.{model}.checkpoint",
        )
    return ManifestError(
        f"ExecuTorch's {model_class} model cannot be made from {spec.params!r}: {cause}; give params of this model "
        "class (dim, n_layers, n_heads, n_kv_heads, vocab_size...)",
        location=f"models.{model}.params",
    )
