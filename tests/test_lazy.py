"""ptebuild.lazy: every name a lazy package exports loads, from the module its table names."""

from __future__ import annotations

import importlib

import pytest

LAZY_PACKAGES = ["ptebuild", "ptebuild.manifest", "ptebuild.runtime", "ptebuild.release"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_exported_name_loads(package):
    module = importlib.import_module(package)
    names = [name for name in module.__all__ if name != "__version__"]
    assert names
    for name in names:
        value = getattr(module, name)
        assert getattr(value, "__name__", name) == name, f"{package}.{name} is {value!r}"


def test_a_plan_type_is_the_one_of_ptebuild_plan():
    import ptebuild.manifest
    import ptebuild.plan

    assert ptebuild.manifest.BuildPlan is ptebuild.plan.BuildPlan
    assert ptebuild.manifest.ShimPlan is ptebuild.plan.ShimPlan


def test_an_unknown_name_is_an_attribute_error():
    import ptebuild.runtime

    with pytest.raises(AttributeError, match="module 'ptebuild.runtime' has no attribute 'nothing'"):
        ptebuild.runtime.nothing  # noqa: B018
