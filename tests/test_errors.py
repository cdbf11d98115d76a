"""Errors carry their manifest and location as fields; str() joins them into one line."""

from __future__ import annotations

import pickle

from ptebuild.errors import BuildError, CheckError, ManifestError, PtebuildError


def test_location_and_manifest_are_fields_joined_by_str():
    error = CheckError("method 'forward' output 0 differs", location="programs.p")
    assert (error.message, error.location, error.manifest) == ("method 'forward' output 0 differs", "programs.p", None)
    assert str(error) == "programs.p: method 'forward' output 0 differs"
    located = BuildError(error.message, manifest="robot.toml", location=error.location)
    assert str(located) == "robot.toml: programs.p: method 'forward' output 0 differs"
    assert str(PtebuildError("plain")) == "plain"


def test_errors_survive_pickling_with_their_fields():
    for error in (BuildError("x", manifest="m.toml", location="models.a.weights"), ManifestError("bad"), CheckError("c")):
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error)
        assert (str(again), again.location, again.manifest) == (str(error), error.location, error.manifest)
        assert again.exit_code == error.exit_code
