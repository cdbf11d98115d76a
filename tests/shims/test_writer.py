"""The .def reader's one check that the writer's tests held: a shim list names its DLL."""

from __future__ import annotations

import pytest

from ptebuild.errors import UsageError
from ptebuild.shims import parse_def


def test_parse_def_needs_a_dll_name():
    with pytest.raises(UsageError, match=r"x.def: no DLL name; add 'LIBRARY aoti_cuda_shims.dll' or pass --dll"):
        parse_def("EXPORTS\n  f\n", "x.def")
