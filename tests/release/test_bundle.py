"""`ptebuild verify BUNDLE`: a bundle checked without unpacking; hostile archives refused one line each."""

from __future__ import annotations

import hashlib
import io
import json
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from release_build import built_tiny

from ptebuild import cli
from ptebuild.release.bundle import verify_bundle
from ptebuild.release.pack import pack

FOLDER = "tiny"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A good bundle of the tiny build, ``tiny.tar.gz`` (read-only for the tests)."""
    manifest = built_tiny(tmp_path_factory)
    return pack(None, manifest, None, tmp_path_factory.mktemp("bundle") / f"{FOLDER}.tar.gz").archive.path


@pytest.fixture
def verify(capsys):
    def run(path) -> tuple[int, list[str], str]:
        code = cli.main(["verify", str(path)])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return code, out.splitlines(), err

    return run


def members(bundle: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(bundle) as tar:
        return [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]


def write_tar(path: Path, items: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in items:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = b"x", link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info, (data if kind == tarfile.REGTYPE else None)


def refusal(name: str, reason: str) -> str:
    return f"{FOLDER}.tar.gz: entry {name!r}: {reason}; refused (a bundle holds plain files in one folder)"


def test_a_good_bundle_verifies(bundle, verify):
    code, lines, _ = verify(bundle)
    assert code == 0, lines
    report = verify_bundle(bundle)
    assert report.ok and report.folder == FOLDER and report.problems == ()
    assert [t.name for t in report.targets] == ["tiny_portable", "tiny_xnnpack"]
    assert "SHA256SUMS" in report.files and "provenance.intoto.json" in report.files


def test_json_report(bundle, capsys):
    assert cli.main(["verify", str(bundle), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["ok"] is True and document["folder"] == FOLDER and document["problems"] == []


HOSTILE = [
    ("absolute", [entry("/etc/evil")], refusal("/etc/evil", "an absolute path")),
    ("dotdot", [entry(f"{FOLDER}/../../evil")], refusal(f"{FOLDER}/../../evil", "'..' in the path")),
    ("symlink", [entry(f"{FOLDER}/link", tarfile.SYMTYPE, link="/etc/passwd")], refusal(f"{FOLDER}/link", "a symbolic link (to '/etc/passwd')")),
    ("hardlink", [entry(f"{FOLDER}/hard", tarfile.LNKTYPE, link=f"{FOLDER}/tiny.toml")], refusal(f"{FOLDER}/hard", f"a hard link (to '{FOLDER}/tiny.toml')")),
    ("device", [entry(f"{FOLDER}/dev", tarfile.CHRTYPE)], refusal(f"{FOLDER}/dev", "a device file")),
    ("fifo", [entry(f"{FOLDER}/pipe", tarfile.FIFOTYPE)], refusal(f"{FOLDER}/pipe", "a FIFO")),
    ("duplicate", [entry(f"{FOLDER}/tiny.toml")], refusal(f"{FOLDER}/tiny.toml", "appears 2 times")),
    ("case", [entry(f"{FOLDER}/TINY.toml")], refusal(f"{FOLDER}/tiny.toml", f"differs from '{FOLDER}/TINY.toml' only in case (one file on macOS and Windows)")),
    ("outside", [entry("other/x")], refusal("other/x", f"outside the bundle folder {FOLDER}/")),
    ("top-level", [entry("README")], refusal("README", f"outside the bundle folder {FOLDER}/")),
    ("backslash", [entry(f"{FOLDER}\\..\\evil")], refusal(f"{FOLDER}\\..\\evil", "a backslash in the name")),
]


@pytest.mark.parametrize("extra, line", [(e, line) for _, e, line in HOSTILE], ids=[i for i, _, _ in HOSTILE])
def test_an_unsafe_entry_is_refused_with_one_line(bundle, tmp_path, verify, extra, line):
    hostile = write_tar(tmp_path / f"{FOLDER}.tar.gz", members(bundle) + extra)
    code, lines, _ = verify(hostile)
    assert code == 1
    assert lines[0] == line
    assert len(lines) == 2 and lines[1].startswith("0 targets: ")  # nothing else was read


def test_each_unsafe_entry_gets_its_own_line(bundle, tmp_path, verify):
    extra = [e for _, entries, _ in HOSTILE[:6] for e in entries]
    code, lines, _ = verify(write_tar(tmp_path / f"{FOLDER}.tar.gz", members(bundle) + extra))
    assert code == 1 and lines[:-1] == [line for _, _, line in HOSTILE[:6]]


def test_a_file_not_in_sha256sums_is_named(bundle, tmp_path, verify):
    hostile = write_tar(tmp_path / f"{FOLDER}.tar.gz", [*members(bundle), entry(f"{FOLDER}/extra.bin", data=b"payload")])
    code, lines, _ = verify(hostile)
    assert code == 1
    assert lines[0] == f"{FOLDER}.tar.gz: {FOLDER}/extra.bin: not listed in SHA256SUMS (a file added after packing?)"
    assert lines[1:3] == ["tiny_portable  ok", "tiny_xnnpack   ok"]


def test_a_flipped_byte_is_named_by_sha256sums_and_by_the_record(bundle, tmp_path, verify):
    items = []
    for info, data in members(bundle):
        if info.name == f"{FOLDER}/tiny_xnnpack_weights.ptd":
            data = bytearray(data)
            data[-1] ^= 0x01
            data = bytes(data)
        items.append((info, data))
    code, lines, _ = verify(write_tar(tmp_path / f"{FOLDER}.tar.gz", items))
    assert code == 1
    assert lines[0].startswith(f"{FOLDER}.tar.gz: {FOLDER}/tiny_xnnpack_weights.ptd: sha256 ")
    assert lines[0].endswith("(changed after packing)")
    assert lines[1].startswith(f"{FOLDER}.tar.gz: {FOLDER}/provenance.intoto.json: subject tiny_xnnpack_weights.ptd has sha256 ")
    assert lines[2] == "tiny_portable  ok"
    assert lines[3].startswith("tiny_xnnpack   FAILED: tiny_xnnpack_weights.ptd: sha256 mismatch")


def test_a_provenance_subject_that_lies_is_named(bundle, tmp_path, verify):
    items = {info.name: (info, data) for info, data in members(bundle)}
    statement = json.loads(items[f"{FOLDER}/provenance.intoto.json"][1])
    statement["subject"][0]["digest"]["sha256"] = "0" * 64
    text = json.dumps(statement).encode()
    sums = items[f"{FOLDER}/SHA256SUMS"][1].decode().splitlines()
    sums = [
        f"{hashlib.sha256(text).hexdigest()}  provenance.intoto.json" if line.endswith("provenance.intoto.json") else line
        for line in sums
    ]
    items[f"{FOLDER}/provenance.intoto.json"] = (items[f"{FOLDER}/provenance.intoto.json"][0], text)
    items[f"{FOLDER}/SHA256SUMS"] = (items[f"{FOLDER}/SHA256SUMS"][0], ("\n".join(sums) + "\n").encode())
    code, lines, _ = verify(write_tar(tmp_path / f"{FOLDER}.tar.gz", list(items.values())))
    assert code == 1
    assert lines[0].startswith(
        f"{FOLDER}.tar.gz: {FOLDER}/provenance.intoto.json: subject {statement['subject'][0]['name']} has sha256 "
        "000000000000..., the file has "
    )
    assert lines[1:3] == ["tiny_portable  ok", "tiny_xnnpack   ok"]


def test_zip_symlinks_and_absolute_names_are_refused(bundle, tmp_path, verify):
    path = tmp_path / f"{FOLDER}.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in members(bundle):
            if data is not None:
                zf.writestr(info.name, data)
        link = zipfile.ZipInfo(f"{FOLDER}/link")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
        zf.writestr(zipfile.ZipInfo("/abs"), b"x")
    code, lines, _ = verify(path)
    assert code == 1
    assert lines[:2] == [
        f"{FOLDER}.zip: entry '{FOLDER}/link': a symbolic link; refused (a bundle holds plain files in one folder)",
        f"{FOLDER}.zip: entry '/abs': an absolute path; refused (a bundle holds plain files in one folder)",
    ]


@pytest.mark.parametrize("keep", [0, 10, 100, 0.5], ids=["empty", "10-bytes", "100-bytes", "half"])
def test_a_cut_archive_is_one_line_exit_2(bundle, tmp_path, verify, keep):
    data = bundle.read_bytes()
    cut = tmp_path / f"{FOLDER}.tar.gz"
    cut.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    code, lines, err = verify(cut)
    assert code == 2 and lines == []
    assert err.startswith(f"error: {cut}: not a readable tar.gz archive: ") and err.count("\n") == 1


def test_verify_of_a_bundle_imports_neither_torch_nor_executorch(bundle):
    script = (
        "import sys\n"
        "from ptebuild import cli\n"
        f"code = cli.main(['verify', {str(bundle)!r}])\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'executorch'))\n"
        "print('heavy:', heavy)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    assert done.stdout.splitlines()[-1] == "heavy: []"


def test_a_manifest_changed_after_packing_is_named_by_the_provenance(bundle, tmp_path, verify):
    items = {info.name: (info, data) for info, data in members(bundle)}
    manifest = items[f"{FOLDER}/tiny.toml"][1] + b"# edited\n"
    items[f"{FOLDER}/tiny.toml"] = (items[f"{FOLDER}/tiny.toml"][0], manifest)
    sums = [
        f"{hashlib.sha256(manifest).hexdigest()}  tiny.toml" if line.endswith("  tiny.toml") else line
        for line in items[f"{FOLDER}/SHA256SUMS"][1].decode().splitlines()
    ]
    items[f"{FOLDER}/SHA256SUMS"] = (items[f"{FOLDER}/SHA256SUMS"][0], ("\n".join(sums) + "\n").encode())
    code, lines, _ = verify(write_tar(tmp_path / f"{FOLDER}.tar.gz", list(items.values())))
    assert code == 1
    assert lines[0].startswith(f"{FOLDER}.tar.gz: {FOLDER}/provenance.intoto.json: the manifest tiny.toml has sha256 ")


# -- verify --runtime: what an ExecuTorch runtime cannot load ------------------------------------------


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """The bundle project's two bundles: edge (a .ptd program, one with weights inside, XNNPACK) and mobile."""
    from release_build import built_bundles

    manifest = built_bundles(tmp_path_factory)
    folder = tmp_path_factory.mktemp("bundles")
    return {name: pack(None, manifest, None, folder / archive, bundle=name).archive.path
            for name, archive in (("edge", "edge.tar.gz"), ("mobile", "tiny-mobile.zip"))}


def test_an_older_runtime_is_refused_one_line_per_program(bundles, run_cli):
    code, out, _ = run_cli("verify", "--runtime", "0.6.0", bundles["edge"])
    lines = out.splitlines()
    assert code == 1
    external = "FAILED: runtime 0.6.0 cannot load it: weights in an external .ptd (FlatTensor layout of 0.7) needs runtime >= 0.7.0"
    assert lines[0] == "tiny_inside    ok"
    assert lines[1].startswith("               note: runtime 0.6.0 is older than the ExecuTorch 1.5.1 that wrote it")
    assert lines[2:4] == [f"tiny_portable  {external}", f"tiny_xnnpack   {external}"]
    assert lines[-1] == f"3 targets: 2 failed (7 files, 14 keys checked, blobs rehashed, judged for runtime 0.6.0) -> {bundles['edge']}"
    report = verify_bundle(bundles["mobile"], runtime=(0, 6, 0))
    assert [t.name for t in report.failed] == ["tiny_xnnpack"] and report.runtime == "0.6.0"
    assert report.targets[0].runtime["minimum"] == "0.7.0"


def test_the_runtime_that_built_it_loads_every_program(bundles, run_cli):
    for bundle in bundles.values():
        code, out, _ = run_cli("verify", "--runtime", "1.5.1", bundle)
        lines = out.splitlines()
        assert code == 0 and not any("note:" in line for line in lines), lines
        assert lines[-1].endswith(f", judged for runtime 1.5.1) -> {bundle}")


def test_a_runtime_that_is_no_version_is_a_usage_error(bundles, run_cli):
    code, out, err = run_cli("verify", "--runtime", "latest", bundles["edge"])
    assert (code, out, err) == (2, "", "error: --runtime: 'latest' is not an ExecuTorch version; give one such as 1.5.1\n")


def test_a_bpte_that_bundles_another_program_is_found(bundles, tmp_path):
    """A .bpte swapped for another program's, SHA256SUMS and the record patched to match."""
    with tarfile.open(bundles["edge"]) as tar:
        items = [(m, tar.extractfile(m).read() if m.isreg() else None) for m in tar.getmembers()]
    files = {m.name: data for m, data in items}
    other = files["edge/tiny_xnnpack.bpte"]
    digest = hashlib.sha256(other).hexdigest()
    record = json.loads(files["edge/ptebuild.json"])
    record["targets"]["tiny_inside"]["outputs"]["tiny_inside.bpte"] = {"sha256": digest, "bytes": len(other)}
    replaced = {"edge/tiny_inside.bpte": other, "edge/ptebuild.json": json.dumps(record).encode()}
    statement = json.loads(files["edge/provenance.intoto.json"])
    for subject in statement["subject"]:
        if subject["name"] == "tiny_inside.bpte":
            subject["digest"]["sha256"] = digest
    replaced["edge/provenance.intoto.json"] = json.dumps(statement).encode()
    sums = "".join(
        f"{hashlib.sha256(replaced.get(m.name, data)).hexdigest()}  {m.name.removeprefix('edge/')}\n"
        for m, data in sorted(items, key=lambda i: i[0].name) if data is not None and m.name != "edge/SHA256SUMS"
    )
    replaced["edge/SHA256SUMS"] = sums.encode()
    forged = write_tar(tmp_path / "edge.tar.gz", [(m, replaced.get(m.name, data)) for m, data in items])
    report = verify_bundle(forged)
    assert [t.name for t in report.failed] == ["tiny_inside"], report.to_json()
    assert report.failed[0].problems == (f"tiny_inside.bpte: bundles another program than tiny_inside.pte (sha256 {hashlib.sha256(files['edge/tiny_xnnpack.pte']).hexdigest()[:12]}...)",)
