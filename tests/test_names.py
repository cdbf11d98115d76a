"""The rules for program and data names."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ptebuild.names import case_key, name_problem

BAD_NAMES = [
    ("", "is empty; use 1 to 200 ASCII letters, digits, '_', '-' and '.'"),
    ("a" * 201, "is 201 characters long; use at most 200"),
    ("../../outside", "contains '/'; use only ASCII letters, digits, '_', '-' and '.'"),
    ("..", "starts with '.'; start with a letter, digit or '_'"),
    ("a/b", "contains '/'; use only ASCII letters, digits, '_', '-' and '.'"),
    ("a\\b", "contains '\\\\'; use only ASCII letters, digits, '_', '-' and '.'"),
    ("enc oder", "contains ' '; use only ASCII letters, digits, '_', '-' and '.'"),
    ("encöder", "contains 'ö'; use only ASCII letters, digits, '_', '-' and '.'"),
    ("w:x", "contains ':'; use only ASCII letters, digits, '_', '-' and '.'"),
    ("nul\x00", "contains '\\x00'; use only ASCII letters, digits, '_', '-' and '.'"),
    (".hidden", "starts with '.'; start with a letter, digit or '_'"),
    ("-rf", "starts with '-'; start with a letter, digit or '_'"),
    ("weights.ptd", "ends with '.ptd'; leave the extension out, ptebuild adds it"),
    ("weights.PTD", "ends with '.ptd'; leave the extension out, ptebuild adds it"),
    ("weights.", "ends with '.'; Windows drops a trailing dot, so end with a letter, digit, '_' or '-'"),
    ("NUL", "is the Windows device name 'NUL' (also with an extension); choose another name"),
    ("nul", "is the Windows device name 'NUL' (also with an extension); choose another name"),
    ("NUL.weights", "is the Windows device name 'NUL' (also with an extension); choose another name"),
    ("con", "is the Windows device name 'CON' (also with an extension); choose another name"),
    ("Prn.x.y", "is the Windows device name 'PRN' (also with an extension); choose another name"),
    ("aux", "is the Windows device name 'AUX' (also with an extension); choose another name"),
    ("COM0", "is the Windows device name 'COM0' (also with an extension); choose another name"),
    ("com9.bin", "is the Windows device name 'COM9' (also with an extension); choose another name"),
    ("LPT1", "is the Windows device name 'LPT1' (also with an extension); choose another name"),
    ("lpt0", "is the Windows device name 'LPT0' (also with an extension); choose another name"),
]

GOOD_NAMES = ["encoder", "Encoder_v2", "policy-xnnpack", "a", "_x", "0", "COM10", "nullable", "con_weights", "a.b.c", "a" * 200]


@pytest.mark.parametrize(("name", "message"), BAD_NAMES, ids=[repr(n)[:30] for n, _ in BAD_NAMES])
def test_bad_names(name, message):
    assert name_problem(name, extension=".ptd") == message


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names(name):
    assert name_problem(name, extension=".ptd") is None


def test_pte_extension_rule_is_per_extension():
    assert name_problem("policy.pte", extension=".pte") == "ends with '.pte'; leave the extension out, ptebuild adds it"
    assert name_problem("policy.pte", extension=".ptd") is None


def test_case_key():
    assert case_key("Encoder.ptd") == case_key("encoder.ptd")
    assert case_key("Straße.ptd") == case_key("STRASSE.ptd")


@given(st.text(max_size=220))
def test_an_accepted_name_is_one_plain_file_in_the_folder(name):
    if name_problem(name, extension=".ptd") is not None:
        return
    path = os.path.normpath(os.path.join("out", name + ".ptd"))
    assert os.path.dirname(path) == "out"
    assert name.isascii() and "/" not in name and "\\" not in name and not name.startswith(".")
