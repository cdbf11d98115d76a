"""An LLM program's tokenizer, loaded as ExecuTorch's runner loads it, and checked against the model.

ExecuTorch's LLM runner (``extension/llm/runner``, ``load_tokenizer``) tries its C++ tokenizers in
turn: a Hugging Face ``tokenizer.json``, tiktoken, SentencePiece, then llama2.c's format; the first
that loads is the tokenizer. :func:`load_tokenizer` does the same with the same C++ classes
(``pytorch_tokenizers``' bindings of them), so what the build checks is what the runner reads.

A tokenizer fits a model when every id it can give (its vocabulary, BOS and EOS) is below the
model's ``vocab_size``: a larger one would index past the embedding table on a device.
:func:`read_facts` reads what the build needs before the export (the fit, BOS, EOS) and frees the
tokenizer: the export is the build's peak of memory, and a 128k-token ``tokenizer.json`` takes
about 60 MiB loaded; the check loads it again.
Imports ``pytorch_tokenizers`` (a worker); nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ptebuild.errors import ManifestError

FORMATS = (
    ("a Hugging Face tokenizer.json", "CppHFTokenizer"),
    ("a tiktoken file", "CppTiktoken"),
    ("a SentencePiece model", "CppSPTokenizer"),
    ("a llama2.c tokenizer", "CppLlama2cTokenizer"),
)
"""The runner's order of trying (executorch 1.5.1 ``llm_runner_helper.cpp``), with the binding's class."""


@dataclass(frozen=True)
class TokenizerFacts:
    """What a tokenizer is, without it: its file, format, vocabulary size, BOS and EOS ids."""

    path: Path
    format: str
    """What it is, in words (``a Hugging Face tokenizer.json``)."""
    vocab_size: int
    bos: int
    eos: int


@dataclass(frozen=True)
class LoadedTokenizer(TokenizerFacts):
    cpp: Any
    """The C++ tokenizer (``encode(text, bos, eos)``, ``decode(token)``)."""

    def encode(self, text: str) -> list[int]:
        """The ids the runner prefills for ``text`` (``GenerationConfig``'s default: no BOS or EOS added)."""
        return list(self.cpp.encode(text, 0, 0))

    def piece(self, token: int) -> bytes | None:
        """The bytes of ``token``'s piece, as the runner's C++ tokenizer decodes it; None where it
        has none (an id past its vocabulary: a model's ``vocab_size`` may pad it).

        A byte-level tokenizer's piece may be part of a UTF-8 character (one byte of a 3-byte
        character): the binding, which returns ``str``, raises UnicodeDecodeError on it, and the
        error holds the piece's bytes. An id past the vocabulary is never handed to the C++
        tokenizer: SentencePiece's crashes the process on one (SIGSEGV)."""
        if not 0 <= token < self.vocab_size:
            return None
        try:
            return str(self.cpp.decode(token)).encode()
        except UnicodeDecodeError as exc:
            return bytes(exc.object)
        except RuntimeError:  # "Tokenizer error: DecodeFailure": no piece for this id
            return None


def load_tokenizer(path: Path, display: str, where: str) -> LoadedTokenizer:
    """Load ``path`` as the runner would. Raises ManifestError at ``where`` if no format reads it."""
    import pytorch_tokenizers

    from ptebuild.lowering.check import native_stderr_silenced

    tried = []
    for words, class_name in FORMATS:
        tokenizer = getattr(pytorch_tokenizers, class_name)()
        try:
            with native_stderr_silenced():  # each C++ loader logs why it refused the file
                tokenizer.load(str(path))
        except RuntimeError as exc:
            tried.append(str(exc).strip().splitlines()[0])
            continue
        return LoadedTokenizer(path, words, int(tokenizer.vocab_size()), int(tokenizer.bos_tok()), int(tokenizer.eos_tok()),
                               tokenizer)
    raise ManifestError(
        f"{path.name} is none of the tokenizers ExecuTorch's runner reads ({'; '.join(tried)}); give a "
        "tokenizer.json, a tiktoken file or a SentencePiece model",
        manifest=display, location=where,
    )


def read_facts(path: Path, display: str, where: str) -> TokenizerFacts:
    """:func:`load_tokenizer`'s facts, the tokenizer freed and the C heap it took given back to the
    system (glibc's ``malloc_trim``; elsewhere what the allocator keeps). Raises as it does."""
    import gc

    from ptebuild import heap

    loaded = load_tokenizer(path, display, where)
    facts = TokenizerFacts(loaded.path, loaded.format, loaded.vocab_size, loaded.bos, loaded.eos)
    del loaded
    gc.collect()
    heap.trim()
    return facts


def check_fits(tokenizer: TokenizerFacts, vocab_size: int, display: str, where: str, params: str) -> None:
    """ManifestError at ``where`` if an id the tokenizer gives is not below the model's ``vocab_size``."""
    largest = max(tokenizer.vocab_size - 1, tokenizer.bos, tokenizer.eos)
    if largest >= vocab_size:
        what = (f"has {tokenizer.vocab_size} tokens" if tokenizer.vocab_size > vocab_size
                else f"uses id {largest} (BOS {tokenizer.bos}, EOS {tokenizer.eos})")
        raise ManifestError(
            f"{tokenizer.path.name} ({tokenizer.format}) {what}, and the model's vocab_size ({params}) is "
            f"{vocab_size}: its ids would index past the embedding table; give the model's own tokenizer "
            "or a vocab_size that holds it",
            manifest=display, location=where,
        )
