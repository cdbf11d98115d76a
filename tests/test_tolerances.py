"""Tolerances by dtype and magnitude: the dtype's, the backend's on top, the manifest's over both."""

from __future__ import annotations

import pytest

from ptebuild.tolerances import DTYPE_TOLERANCES, EXACT, CheckSettings, Tolerance


def test_each_output_gets_the_looser_of_its_dtype_and_its_backend():
    xnnpack = CheckSettings(Tolerance(atol=1e-3, rtol=1e-4, min_cosine=0.9999))
    assert xnnpack.for_dtype("float32") == Tolerance(1e-3, 1e-4, 0.9999)  # the backend's is looser
    bf16 = xnnpack.for_dtype("bfloat16")
    assert (bf16.atol, bf16.rtol, bf16.min_cosine) == (1e-3, 0.25, 0.999)  # rtol and cosine: bfloat16's
    assert xnnpack.for_dtype("float16").rtol == pytest.approx(32 * 2**-10)
    assert xnnpack.for_dtype("int64") == EXACT and xnnpack.for_dtype("bool") == EXACT


def test_the_manifest_sets_a_part_for_every_output():
    settings = CheckSettings(Tolerance(1e-3, 1e-4, 0.9999), atol=0.5, min_cosine=0.9)
    assert settings.for_dtype("bfloat16") == Tolerance(0.5, 0.25, 0.9)
    assert settings.for_dtype("int32") == Tolerance(0.5, 0.0, 0.9)  # an integer output too, when asked


def test_the_dtype_anchor_is_assert_closes():
    assert (DTYPE_TOLERANCES["float32"].atol, DTYPE_TOLERANCES["float32"].rtol) == (1e-5, 1.3e-6)
    assert all(t.atol == 1e-5 for name, t in DTYPE_TOLERANCES.items() if name != "float64")
    assert str(Tolerance(1e-3, 1e-4, 0.9999)) == "atol 0.001, rtol 0.0001, cosine >= 0.9999" and str(EXACT) == "exact"
