"""ptebuild: declarative, content-addressed builds of reproducible ExecuTorch artifacts.

Public API (importing this package imports neither torch nor executorch):

- :func:`ptebuild.manifest.load_manifest` reads and validates a manifest.
- :func:`ptebuild.runtime.load` loads a ``.pte`` with its ``.ptd`` files, verified.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
