"""An LLM's tokenizer, loaded as ExecuTorch's runner loads it (``ptebuild.models.executorch_llm.tokenizer``):
each format the runner reads, made here (no download), and its ids checked against the model's vocabulary."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from byte_tokenizer import write_byte_level

from ptebuild.errors import ManifestError
from ptebuild.models.executorch_llm.tokenizer import check_fits, load_tokenizer

ROOT = Path(__file__).resolve().parents[2]
WHERE = "models.chat.tokenizer"


def _tiktoken(path: Path) -> Path:
    """A tiktoken file of the 256 bytes (``<base64 piece> <rank>`` per line)."""
    path.write_text("".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    return path


def _sentencepiece(path: Path) -> Path:
    """A small SentencePiece model trained here on a few sentences."""
    import sentencepiece

    text = ["once upon a time there was a little model", "it generated tokens one by one", "the end of the story"] * 50
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(text), model_writer=model, vocab_size=60,
                                            model_type="bpe", minloglevel=3)
    path.write_bytes(model.getvalue())
    return path


def test_the_three_formats_the_runner_reads(tmp_path):
    hf = load_tokenizer(ROOT / "manifests" / "chat" / "tokenizer.json", "chat.toml", WHERE)
    assert (hf.format, hf.vocab_size) == ("a Hugging Face tokenizer.json", 256)
    tiktoken = load_tokenizer(_tiktoken(tmp_path / "tokenizer.model"), "chat.toml", WHERE)
    # The C++ tiktoken adds Llama 3's 256 special tokens after the file's pieces: BOS and EOS among them.
    assert (tiktoken.format, tiktoken.vocab_size, tiktoken.bos, tiktoken.eos) == ("a tiktoken file", 512, 256, 257)
    assert tiktoken.encode("hi") == [ord("h"), ord("i")] and tiktoken.piece(ord("h")) == b"h"
    sp = load_tokenizer(_sentencepiece(tmp_path / "sp.model"), "chat.toml", WHERE)
    assert (sp.format, sp.vocab_size, sp.bos, sp.eos) == ("a SentencePiece model", 60, 1, 2)
    assert b"".join(sp.piece(t) for t in sp.encode("once upon a time")).strip() == b"once upon a time"


def test_a_piece_that_is_part_of_a_character_is_its_bytes_and_an_id_without_a_piece_is_none(tmp_path):
    """A byte-level tokenizer's piece may be one byte of a character (every real one has them):
    before, reading its piece raised UnicodeDecodeError (the binding returns str), and the build of a
    right program failed with it. An id past the tokenizer's pieces (a padded vocabulary) has none."""
    for path in (write_byte_level(tmp_path / "tokenizer.json"), _tiktoken(tmp_path / "tokenizer.model")):
        tokenizer = load_tokenizer(path, "chat.toml", WHERE)
        ids = tokenizer.encode("héllo wörld")
        pieces = [tokenizer.piece(i) for i in ids]
        assert b"\xc3" in pieces and b"\xa9" in pieces, pieces  # é is two pieces of one byte each
        assert b"".join(pieces).decode() == "héllo wörld"
        assert tokenizer.piece(tokenizer.vocab_size + 7) is None
    # SentencePiece's C++ decode crashed the process (SIGSEGV) on an id past its vocabulary: the
    # check of a model whose vocab_size pads it killed the worker.
    sentencepiece = load_tokenizer(_sentencepiece(tmp_path / "sp.model"), "chat.toml", WHERE)
    assert sentencepiece.piece(sentencepiece.vocab_size + 7) is None and sentencepiece.piece(-1) is None


def test_a_tiktoken_files_special_tokens_count_against_the_vocabulary(tmp_path):
    """256 pieces need a vocab_size of 512: the special tokens the runner adds are ids too."""
    tokenizer = load_tokenizer(_tiktoken(tmp_path / "tokenizer.model"), "chat.toml", WHERE)
    check_fits(tokenizer, 512, "chat.toml", WHERE, "chat/params.json")
    with pytest.raises(ManifestError) as refused:
        check_fits(tokenizer, 256, "chat.toml", WHERE, "chat/params.json")
    assert refused.value.location == WHERE
    assert ("tokenizer.model (a tiktoken file) has 512 tokens, and the model's vocab_size (chat/params.json) is 256: "
            "its ids would index past the embedding table") in str(refused.value)


def test_a_file_no_format_reads_is_one_located_line(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(ManifestError) as refused:
        load_tokenizer(path, "chat.toml", WHERE)
    assert refused.value.location == WHERE
    assert "tokenizer.json is none of the tokenizers ExecuTorch's runner reads" in str(refused.value)
    assert "give a tokenizer.json, a tiktoken file or a SentencePiece model" in str(refused.value)
