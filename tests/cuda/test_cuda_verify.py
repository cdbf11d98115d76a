"""ptebuild's loader checks a CUDA .pte against its .ptd in pure Python: committed GPU-built files."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ptebuild.errors import LoadError
from ptebuild.runtime import check
from ptebuild.runtime.ptd_file import read_ptd

DATA = Path(__file__).resolve().parent / "data"
PTE = DATA / "tiny_cuda_a.pte"
OWN = DATA / "tiny_cuda_a_weights.ptd"
OTHER = DATA / "tiny_cuda_b_weights.ptd"


def test_right_pair_is_accepted_with_its_bytes():
    checked = check(PTE, [OWN], verify_bytes=True)
    assert checked.data_path == OWN
    assert checked.pte.opaque_delegates == ()  # the CUDA payload was read, not skipped
    # Three weights in the .ptd; the .so is named data of the .pte itself.
    assert len(checked.pte.required_keys) == 3
    assert any(k.endswith("_so_blob") for k in checked.pte.named_data_keys)


def test_other_programs_weights_are_refused_naming_the_key():
    with pytest.raises(LoadError) as info:
        check(PTE, [OTHER])
    message = str(info.value)
    assert message.startswith(f"{PTE}: needs key 'cuda_fqn_weight:cuda:model.hidden.bias@sha256:")
    assert "and 2 more, not found in the .ptd files searched: " in message and str(OTHER) in message


def test_no_ptd_is_refused():
    with pytest.raises(LoadError, match=r"needs key 'cuda_fqn_weight:cuda:.*not found in the \.ptd files searched: no \.ptd given"):
        check(PTE, [])


def test_flipped_byte_is_caught_with_bytes(tmp_path: Path):
    corrupt = tmp_path / OWN.name
    shutil.copyfile(OWN, corrupt)
    entry = read_ptd(corrupt).entries["cuda_fqn_weight:cuda:model.out.weight@sha256:" + _digest("model.out.weight")]
    data = bytearray(corrupt.read_bytes())
    data[entry.offset + 5] ^= 0x01
    corrupt.write_bytes(bytes(data))
    check(PTE, [corrupt])  # the keys still match: only hashing the bytes can tell
    with pytest.raises(LoadError, match=r"blob of key 'cuda_fqn_weight:cuda:model\.out\.weight@sha256:[0-9a-f]{64}' at offset \d+ hashes to sha256:[0-9a-f]{64}: the file is corrupt"):
        check(PTE, [corrupt], verify_bytes=True)


def test_check_imports_neither_torch_nor_executorch():
    code = (
        "import sys; from ptebuild.runtime import check; "
        f"check({str(PTE)!r}, [{str(OWN)!r}], verify_bytes=True); "
        "assert 'torch' not in sys.modules and 'executorch' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _digest(fqn: str) -> str:
    from ptebuild.backends.cuda.delegates import read_cuda_delegates

    (delegate,) = read_cuda_delegates(PTE)
    return next(w.storage_key for w in delegate.payload.weights if w.fqn == fqn).rpartition(":")[2]


def test_inspect_lists_the_keys_a_cuda_program_needs():
    """``ptebuild inspect`` reads the CUDA payload like the loader: its weight keys, not 'unknown'."""
    from ptebuild.runtime.inspect import describe, inspect

    result = inspect(PTE)
    needed = check(PTE, [OWN]).pte.required_keys
    assert set(result.needs) == needed and len(needed) == 3
    (delegate,) = result.methods[0].delegates
    assert delegate.keys is not None and set(delegate.keys) >= needed
    assert f"needs from a .ptd: {len(needed)} keys" in describe(result)
