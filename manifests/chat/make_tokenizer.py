"""Make chat.toml's tokenizer (``tokenizer.json``): a byte-level BPE of 256 tokens over printable ASCII.

Run from the repository root: ``.venv/bin/python manifests/chat/make_tokenizer.py``. Nothing is
downloaded: the ``tokenizers`` library (installed with transformers) trains it on the text below.

Every piece decodes to ASCII, so any token a random-weight model picks is whole characters: the
LLM runner's Python token callback never meets a piece that is not valid UTF-8 (a byte-level
tokenizer with the full byte alphabet has pieces that are half a character). Its size equals the
model's ``vocab_size`` (params.json), so every id the model can produce is a token. Token 0 is
``<|begin_of_text|>`` (BOS) and 1 ``<|end_of_text|>`` (EOS): ExecuTorch's C++ tokenizer takes its
BOS and EOS from these names, and ptebuild writes them into the program's metadata.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB_SIZE = 256
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]
TEXT = """
Once upon a time there was a small robot that lived in a workshop by the sea. Every morning it
woke up, checked its batteries and rolled to the window to watch the boats. The robot liked to
count the waves, the birds and the clouds, and it wrote the numbers in a little book.
One day a girl came in with a broken clock. "Can you fix it?" she asked. The robot opened the
clock, looked at the gears and said: "Yes, I think I can." It worked all afternoon, and when the
sun went down the clock was ticking again. The girl laughed, thanked the robot and went home.
A build system reads a manifest, exports each model, lowers it for a backend, checks the program
against the eager model, and stores the result by the content of everything it depends on.
""" * 4


def main(out: Path) -> None:
    ascii_alphabet = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    # The byte-level names of the ASCII characters only (' ' -> 'Ġ', '\n' -> 'Ċ'): no piece for a
    # byte above 0x7f can ever be made.
    alphabet = sorted({piece for c in ascii_alphabet for piece, _ in byte_level.pre_tokenize_str(c)})
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=SPECIAL, initial_alphabet=alphabet, limit_alphabet=len(alphabet),
        show_progress=False,
    )
    tokenizer.train_from_iterator([TEXT], trainer=trainer)
    size = tokenizer.get_vocab_size()
    if size != VOCAB_SIZE:
        raise SystemExit(f"trained {size} tokens, not {VOCAB_SIZE}: add text")
    for token in range(size):
        piece = tokenizer.decode([token], skip_special_tokens=False)
        piece.encode("ascii")  # raises if a piece is not ASCII
    tokenizer.save(str(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("tokenizer.json"))
