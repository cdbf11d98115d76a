"""ptebuild's version: the bottom floor, imported by the package's face and by every module that
names the version (keys, the plan cache, the no-op stamp, provenance, ``--version``)."""

__version__ = "0.1.0"
