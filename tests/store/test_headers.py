"""The remote cache's URL, headers and credentials (ptebuild.store.headers): checked, sent, never shown."""

from __future__ import annotations

import base64
import traceback

import pytest
from http_helpers import KEY, TOKEN, blob, document, tier

from ptebuild.errors import CorruptObject, StoreError, UsageError
from ptebuild.store.headers import headers_from
from ptebuild.store.http import HttpTier


def test_credentials_never_appear(space, proxy, tmp_path, closed_port):
    src, digest = blob(tmp_path, "a.bin", 1000)
    warnings: list[str] = []
    texts: list[str] = []
    url = f"http://user:pw-{TOKEN}@127.0.0.1:{proxy.port}/{space.prefix}"
    t = tier(url, warnings, headers={"Authorization": f"Bearer {TOKEN}", "X-Extra": TOKEN}, secret=TOKEN.encode(), retries=0, max_failures=4)
    t.blobs.put_file(src, digest)
    t.actions.put(KEY, document(KEY, [digest]), [digest])
    sent = proxy.log()[0][3]
    assert sent["Authorization"] == f"Bearer {TOKEN}" and sent["X-Extra"] == TOKEN  # really sent
    proxy.fault("500", times=1)
    t.actions.get(KEY)
    proxy.fault("flip", times=1)
    with pytest.raises(CorruptObject) as corrupt:
        t.blobs.fetch(digest, tmp_path / "b")
    proxy.fault("refuse")
    t.blobs.has(digest)
    with pytest.raises(StoreError) as down:
        t.blobs.has(digest)
    for err in (corrupt.value, down.value):
        texts += [str(err), repr(err), "".join(traceback.format_exception(err))]
        assert err.__cause__ is None and err.__context__ is None  # no library exception (with its request) rides along
    texts += [*warnings, t.name, repr(t), str(t.stats()), repr(t.blobs), repr(t.actions), str(t.disabled), repr(vars(t))]
    assert len(warnings) == 2 and t.disabled
    for text in texts:
        assert TOKEN not in text and "user:" not in text, text
    assert t.name == f"remote cache http://127.0.0.1:{proxy.port}/{space.prefix}"


def test_url_userinfo_is_sent_as_basic_auth(space, proxy):
    t = tier(f"http://alice:{TOKEN}@127.0.0.1:{proxy.port}/{space.prefix}")
    t.actions.get(KEY)
    assert proxy.log()[0][3]["Authorization"] == "Basic " + base64.b64encode(f"alice:{TOKEN}".encode()).decode()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (f"http://h/c?token={TOKEN}", "--remote-cache http://h/c: a query string or fragment is not supported; pass a token with --remote-cache-header NAME=VALUE"),
        (f"ftp://u:{TOKEN}@h/c", "--remote-cache: 'ftp://h/c' is not an http:// or https:// URL with a host; give http[s]://host[:port][/prefix]"),
        (f"http://u:{TOKEN}@h:99999/c", "--remote-cache: not a valid URL; give http[s]://host[:port][/prefix]"),
    ],
)
def test_bad_urls_are_refused_without_their_secrets(url, message):
    with pytest.raises(UsageError) as err:
        HttpTier(url)
    assert str(err.value) == message


def test_headers_from_the_command_line_and_the_environment():
    env = {"PTEBUILD_REMOTE_CACHE_HEADER": f"Authorization=Bearer {TOKEN}\nX-A=1\n"}
    assert headers_from(["x-a=2"], env) == {"Authorization": f"Bearer {TOKEN}", "x-a": "2"}
    for bad in (f"no-equals-{TOKEN}", f"Bad Name={TOKEN}", f"X=a\r\nInjected: {TOKEN}"):
        with pytest.raises(UsageError) as err:
            headers_from([bad], {})
        assert TOKEN not in str(err.value)
    with pytest.raises(UsageError) as err:
        HttpTier("http://127.0.0.1:1", headers={"X": f"{TOKEN}\n"})
    assert TOKEN not in str(err.value)
