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


FACTS_MEMORY = """
import sys
from pathlib import Path
import pytorch_tokenizers  # noqa: F401  (its own code counted before)
from ptebuild.models.executorch_llm import tokenizer as t

def resident_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

before = resident_mib()
held = getattr(t, sys.argv[2])(Path(sys.argv[1]), "m.toml", "models.m.tokenizer")
print(held.vocab_size, held.bos, held.eos, round(resident_mib() - before))
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads this process's memory from /proc (Linux)")
def test_the_facts_read_before_the_export_hold_no_tokenizer_in_memory(tmp_path):
    # The export is an LLM build's peak of memory, and a 128256-token tokenizer.json held through it
    # takes 59 MiB (measured here). With Llama-3.2-1B's dimensions the worker's peak stayed 45 to 60 MiB
    # above export_llm's both before and after (bench/bench_llm_1b.py): this is not all of that gap.
    import subprocess
    import sys

    path = tmp_path / "tokenizer.json"
    subprocess.run([sys.executable, str(ROOT / "tests" / "models" / "smollm2" / "make_tokenizer.py"), str(path), "128256"],
                   check=True)
    found = {}
    for how in ("load_tokenizer", "read_facts"):
        done = subprocess.run([sys.executable, "-c", FACTS_MEMORY, str(path), how], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        *facts, grown = done.stdout.split()
        found[how] = (facts, int(grown))
    assert found["read_facts"][0] == found["load_tokenizer"][0] == ["128256", "0", "1"]
    assert found["load_tokenizer"][1] >= 40  # what holding it costs (this test can tell)
    assert found["read_facts"][1] <= 16, found  # the C++ tokenizer freed, and its heap given back
