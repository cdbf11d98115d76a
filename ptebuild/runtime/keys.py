"""The named-data keys ptebuild writes into ``.pte``/``.ptd`` files, and how to read them back.

A ``.pte`` refers to each weight kept outside it by a string key; the ``.ptd`` maps keys to
bytes. If the key is only the parameter name, two programs of one architecture share every
key and either ``.ptd`` loads with either ``.pte``. So every key carries the SHA-256 of the
weight's bytes, and a ``.pte`` only finds its own weights:

- portable (non-delegated) constants, keyed by ptebuild: ``<fqn>@sha256:<64 hex>``, e.g.
  ``layers.0.weight@sha256:9f86…``. The FQN stays for people and tools reading the file,
  and it keeps two tensors with equal bytes but different shapes or dtypes (say, two zero
  biases) on separate keys, each with its own tensor layout in the ``.ptd``.
- delegate constants, keyed by ExecuTorch itself (its named data store): ``<64 hex>``, the bare
  digest. A delegate with key forms of its own says what they promise through the payload
  reader its backend declares (:meth:`ptebuild.runtime.payloads.PayloadReader.key_sha256`).

This module imports neither torch nor executorch.
"""

from __future__ import annotations

import re

SHA256_MARKER = "@sha256:"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


def weight_key(fqn: str, sha256_hex: str) -> str:
    """Returns the key ptebuild gives a portable constant named ``fqn`` with this digest."""
    if not _HEX_DIGEST.fullmatch(sha256_hex):
        raise ValueError(f"not a lowercase hex SHA-256 digest: {sha256_hex!r}")
    return f"{fqn}{SHA256_MARKER}{sha256_hex}"


def sha256_in_key(key: str) -> str | None:
    """Returns the hex SHA-256 a key promises for its bytes, or None if it carries none: the
    forms above, then the forms a payload reader declares (which loads the backends' readers)."""
    if _HEX_DIGEST.fullmatch(key):
        return key
    _, marker, digest = key.rpartition(SHA256_MARKER)
    if marker and _HEX_DIGEST.fullmatch(digest):
        return digest
    from ptebuild.runtime import payload_lookup

    return payload_lookup.key_sha256(key)
