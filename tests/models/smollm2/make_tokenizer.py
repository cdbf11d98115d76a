"""A byte-level BPE tokenizer of exactly N tokens whose pieces are all ASCII (for a model of that
vocabulary with random weights: every id it generates decodes to whole characters).

``python make_tokenizer.py OUT.json N``. Made, not trained: the two special tokens (``<|begin_of_text|>``
BOS, ``<|end_of_text|>`` EOS), the byte-level names of the printable ASCII characters and the
newline, then every pair of them and every pair followed by one more, each with the merge that
makes it, until there are N.
"""

from __future__ import annotations

import itertools
import string
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]


def make(out: Path, size: int) -> None:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    characters = [c for c in string.printable if c not in "\t\r\x0b\x0c"]
    alphabet = sorted({piece for c in characters for piece, _ in byte_level.pre_tokenize_str(c)})
    vocab = {token: i for i, token in enumerate(SPECIAL + alphabet)}
    merges = []
    pairs = [a + b for a, b in itertools.product(alphabet, alphabet)]
    for left, right in itertools.chain(itertools.product(alphabet, alphabet), itertools.product(pairs, alphabet)):
        if len(vocab) >= size:
            break
        vocab[left + right] = len(vocab)
        merges.append((left, right))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.add_special_tokens(SPECIAL)
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    if tokenizer.get_vocab_size() != size:
        raise SystemExit(f"made {tokenizer.get_vocab_size()} tokens, not {size}")
    tokenizer.save(str(out))


if __name__ == "__main__":
    make(Path(sys.argv[1]), int(sys.argv[2]))
