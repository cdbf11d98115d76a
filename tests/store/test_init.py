import subprocess
import sys
from pathlib import Path

import pytest

from ptebuild.errors import StoreError
from ptebuild.store import Store, default_cache_dir

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"PTEBUILD_CACHE": "/c/p", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/c/p"),
        ({"PTEBUILD_CACHE": "", "XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/ptebuild"),
        ({"XDG_CACHE_HOME": "relative/x", "HOME": "/h"}, "/h/.cache/ptebuild"),
        ({"HOME": "/h"}, "/h/.cache/ptebuild"),
    ],
)
def test_default_cache_dir(env, expected):
    assert default_cache_dir(env) == Path(expected)


def test_opening_creates_nothing(tmp_path):
    Store(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_unusable_folder_reads_fine_and_fails_on_write(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = Store(blocker / "cache")  # can never be created
    src = tmp_path / "src"
    src.write_bytes(b"data")
    assert store.digest_file(src)[1] == 4
    assert store.actions.get("ab" * 16) is None
    assert store.actions.last_for("p") is None
    assert not store.cas.has("a" * 64)
    store.record_hit()
    assert store.stats()["entries"] == 0
    with pytest.raises(StoreError, match="cannot"):
        store.cas.put_file(src)
    with pytest.raises(StoreError, match="cannot"):
        store.cas.put_bytes(b"x")
    with pytest.raises(StoreError, match="cannot"):
        store.actions.put("ab" * 16, "p", {})
    with pytest.raises(StoreError, match="cannot"):
        store.lock("ab" * 16)


def test_import_is_light():
    code = (
        "import sys, ptebuild.store; "
        "bad = [m for m in ('torch', 'executorch', 'pydantic', 'filelock', 'sqlite3', 'json') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
