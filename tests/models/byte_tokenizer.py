"""A byte-level BPE ``tokenizer.json`` with no merges, made here: the pieces are single bytes.

As in every real byte-level tokenizer (GPT-2's, Llama 3's, Qwen's, SmolLM's), a byte at or above
0x80 is a piece of its own that is part of a UTF-8 character, not a character: what a random-weight
model picks among them is text only where the bytes join into characters. ``size`` below the
model's ``vocab_size`` makes a padded vocabulary (ids the tokenizer has no piece for), as many
released checkpoints have (Qwen2.5: 151936 ids, 151665 tokens).
"""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>"]


def write_byte_level(path: Path, size: int = 256, skip: bytes = b"\x00\x01") -> Path:
    """Ids 0 and 1 BOS and EOS, then one piece per byte (all but ``skip``) up to ``size`` ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_names = {b: name for b, name in _byte_names(alphabet).items() if bytes([b]) not in skip}
    vocab = {name: i for i, name in enumerate(SPECIAL)}
    for byte in sorted(byte_names):
        if len(vocab) == size:
            break
        vocab[byte_names[byte]] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in SPECIAL])
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def _byte_names(alphabet: list[str]) -> dict[int, str]:
    """GPT-2's map of bytes to printable characters (the ByteLevel pre-tokenizer's names)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    names, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            names[byte] = chr(byte)
        else:
            names[byte] = chr(256 + extra)
            extra += 1
    assert set(names.values()) == set(alphabet)
    return names
