"""A build's progress: a line per step in a log; on a terminal one line rewritten in place, and
only each target's end and the warnings kept."""

from __future__ import annotations

import io
import os

from ptebuild.cli.progress import TerminalReport

EVENTS = [
    ("a", "start", "lowering for xnnpack"),
    ("b", "start", "lowering for portable"),
    ("a", "progress", "still lowering for xnnpack (45s; lowering 32s of ~40s expected, 80%)"),
    ("b", "done", "built"),
    ("", "warning", "the cache is nearly full"),
    ("a", "done", "built"),
]


def test_a_log_gets_a_line_per_step():
    stream = io.StringIO()
    report = TerminalReport(stream, quiet=False, live=False)
    for event in EVENTS:
        report(*event)
    report.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == len(EVENTS) and "\r" not in stream.getvalue()
    assert lines[2].endswith("] a: still lowering for xnnpack (45s; lowering 32s of ~40s expected, 80%)")
    assert lines[4] == "warning: the cache is nearly full"


def test_a_terminal_gets_one_updating_line_and_keeps_the_ends_and_warnings():
    stream = io.StringIO()
    report = TerminalReport(stream, quiet=False, live=True)
    for event in EVENTS:
        report(*event)
    report.close()
    text = stream.getvalue()
    kept = [line for line in text.replace("\r\x1b[K", "\n").splitlines() if line and "running:" not in line]
    assert [line.split("] ", 1)[-1] for line in kept] == ["b: built", "warning: the cache is nearly full", "a: built"]
    updates = [part for part in text.split("\r\x1b[K") if "running:" in part]
    assert updates[0].endswith("0 done, 1 running: a: lowering for xnnpack")
    assert "0 done, 2 running: a: lowering for xnnpack; b: lowering for portable" in updates[1]
    assert all(len(u.split("\n")[0]) <= 80 for u in updates)  # cut to the width (80 where it is unknown)
    assert text.endswith("] a: built\n") and not report.shown  # nothing running: no live line left under the table


def test_a_real_terminal_is_told_apart_from_a_pipe():
    leader, follower = os.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as tty:
            assert TerminalReport(tty, quiet=False).live
        read, write = os.pipe()
        with os.fdopen(write, "w") as pipe:
            assert not TerminalReport(pipe, quiet=False).live
        os.close(read)
    finally:
        os.close(leader)
        os.close(follower)


def test_json_keeps_only_warnings():
    stream = io.StringIO()
    report = TerminalReport(stream, quiet=True, live=True)
    for event in EVENTS:
        report(*event)
    assert stream.getvalue() == "warning: the cache is nearly full\n"
