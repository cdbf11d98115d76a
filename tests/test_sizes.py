import pytest

from ptebuild.errors import UsageError
from ptebuild.store import format_size, parse_size


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1000", 1000),
        ("0", 0),
        ("500M", 500_000_000),
        ("500MB", 500_000_000),
        ("2G", 2_000_000_000),
        ("2g", 2_000_000_000),
        ("1.5GiB", 1_610_612_736),
        ("1.5Gi", 1_610_612_736),
        ("10KiB", 10_240),
        ("3T", 3 * 10**12),
        ("12B", 12),
        (" 7 M ", 7_000_000),
        (".5K", 500),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "-1", "1.2.3G", "5X", "1e9", "ten", "5 GB extra"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match=r"invalid size .*e\.g\. 500M, 2G, 1\.5GiB"):
        parse_size(text)


@pytest.mark.parametrize(
    "n, text", [(0, "0 B"), (512, "512 B"), (1536, "1.5 KiB"), (3 * 1024**3, "3.0 GiB")]
)
def test_format_size(n, text):
    assert format_size(n) == text
