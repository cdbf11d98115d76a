"""ptebuild.runtime.load: refuses a .pte with the wrong or no .ptd, verifies bytes, runs methods."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import torch
from runtime_programs import EXAMPLE, two_linear

from ptebuild.errors import FormatError, LoadError
from ptebuild.runtime import check, load, read_ptd

X = torch.linspace(-1, 1, 4).reshape(1, 4)


def test_matching_pair_loads_and_runs(programs):
    program = load(programs.a.pte, [programs.a.ptd])
    assert program.method_names == ("forward",)
    assert program.data_path == programs.a.ptd
    (out,) = program.run("forward", [X])
    torch.testing.assert_close(out, programs.a.model(X))


def test_cross_load_is_refused_naming_pte_key_and_ptd_searched(programs):
    """Same architecture, same parameter names, other seed, same folder: refused before executorch."""
    with pytest.raises(LoadError) as info:
        load(programs.a.pte, [programs.b.ptd])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{programs.a.pte}: needs key '")
    key = re.search(r"needs key '([^']+)'", message).group(1)
    assert key in check(programs.a.pte, [programs.a.ptd]).pte.required_keys
    assert key not in read_ptd(programs.b.ptd).keys
    assert "and 3 more" in message
    assert f"searched: {programs.b.ptd} (built for 'b' per ptebuild.json)" in message
    assert message.endswith("; ptebuild.json pairs it with a_weights.ptd; give the .ptd built with this .pte")


def test_cross_load_is_refused_for_xnnpack(programs):
    with pytest.raises(LoadError, match=rf"^{programs.xa.pte}: needs key '[0-9a-f]{{64}}'"):
        load(programs.xa.pte, [programs.xb.ptd])


@pytest.mark.parametrize("name", ["a", "xa"])
def test_pte_without_its_ptd_is_refused(programs, name):
    built = getattr(programs, name)
    with pytest.raises(LoadError, match=r"not found in the \.ptd files searched: no \.ptd given"):
        load(built.pte)


def test_executorch_alone_crashes_on_xnnpack_pte_without_ptd(programs):
    """Why the check runs first: executorch 1.5.1 segfaults in load_method here instead of raising."""
    code = (
        "from executorch.runtime import Runtime\n"
        f"Runtime.get().load_program({str(programs.xa.pte)!r}).load_method('forward')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert result.returncode != 0


def test_program_without_external_keys_loads_without_ptd(programs):
    program = load(programs.xinline.pte)
    assert program.data_path is None
    torch.testing.assert_close(program.run("forward", [X])[0], programs.a.model(X), atol=1e-5, rtol=1e-5)


def test_the_right_ptd_is_found_among_several(programs):
    program = load(programs.multi.pte, [programs.a.ptd, programs.multi.ptd])
    assert program.data_path == programs.multi.ptd
    torch.testing.assert_close(program.run("doubled", [X])[0], programs.multi.model(X) * 2)


def test_keys_split_over_two_ptds_are_refused(tmp_path):
    """executorch 1.5.1 takes one .ptd per program; say so instead of failing inside it."""
    from executorch.exir import ExecutorchBackendConfig, to_edge

    from ptebuild.lowering.weightkeys import key_constants_by_sha256

    config = ExecutorchBackendConfig(
        external_constants=lambda node: "one" if "first" in node.name else "two"
    )
    et = to_edge(torch.export.export(two_linear(7), EXAMPLE)).to_executorch(config)
    key_constants_by_sha256(et, config)
    with open(tmp_path / "split.pte", "wb") as f:
        et.write_to_file(f)
    et.write_tensor_data_to_file(str(tmp_path))
    one, two = tmp_path / "one.ptd", tmp_path / "two.ptd"
    with pytest.raises(LoadError, match=rf"its keys are split over {one}, {two}; executorch 1.5.1"):
        check(tmp_path / "split.pte", [one, two])
    with pytest.raises(LoadError, match=r"needs key 'second\.bias@sha256:[0-9a-f]{64}' and 1 more"):
        check(tmp_path / "split.pte", [one])


def test_verify_bytes_catches_a_flipped_byte(programs, tmp_path):
    ptd = tmp_path / "a_weights.ptd"
    shutil.copy(programs.a.ptd, ptd)
    entry = next(iter(read_ptd(ptd).entries.values()))
    raw = bytearray(ptd.read_bytes())
    raw[entry.offset] ^= 0x01
    ptd.write_bytes(raw)
    check(programs.a.pte, [ptd])  # keys still match: only hashing can tell
    with pytest.raises(LoadError, match=rf"^{ptd}: blob of key '{re.escape(entry.key)}' .* the file is corrupt; build it again$"):
        load(programs.a.pte, [ptd], verify_bytes=True)


def test_verify_bytes_passes_intact_files(programs):
    check(programs.a.pte, [programs.a.ptd], verify_bytes=True)
    check(programs.xa.pte, [programs.xa.ptd], verify_bytes=True)


def test_verify_bytes_refuses_keys_without_a_digest(programs):
    with pytest.raises(LoadError, match=r"cannot verify key 'first\.bias': it carries no sha256"):
        check(programs.a_raw.pte, [programs.a_raw.ptd], verify_bytes=True)


def test_unknown_method_is_refused(programs):
    program = load(programs.a.pte, [programs.a.ptd])
    with pytest.raises(LoadError, match=r"no method 'backward'; call one of forward"):
        program.run("backward", [X])


def test_malformed_build_record_is_a_format_error(programs, tmp_path):
    for name in ("a.pte", "b_weights.ptd"):
        shutil.copy(programs.folder / name, tmp_path / name)
    (tmp_path / "ptebuild.json").write_text(
        '{"format": "ptebuild-record", "version": 1, "targets": {"a": {"outputs": {"a.pte": 3}}}}'
    )
    with pytest.raises(FormatError, match=r"ptebuild\.json: targets\.a\.outputs\.a\.pte: needs a plain file name"):
        load(tmp_path / "a.pte", [tmp_path / "b_weights.ptd"])


def test_without_build_record_the_message_names_files_only(programs, tmp_path):
    for name in ("a.pte", "b_weights.ptd"):
        shutil.copy(programs.folder / name, tmp_path / name)
    with pytest.raises(LoadError) as info:
        load(tmp_path / "a.pte", [tmp_path / "b_weights.ptd"])
    assert str(info.value).endswith(f"searched: {tmp_path / 'b_weights.ptd'}; give the .ptd built with this .pte")


def test_a_single_data_path_is_taken_as_one_file(programs):
    assert check(programs.a.pte, str(programs.a.ptd)).data_path == programs.a.ptd
