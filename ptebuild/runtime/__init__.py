"""Reading ``.pte``/``.ptd`` files without executing them, and loading them verified.

Importing this package imports neither torch nor executorch; :func:`load` imports
``executorch.runtime`` only once the files have passed their checks.
"""

from ptebuild.runtime.loader import CheckedFiles, VerifiedProgram, check, load
from ptebuild.runtime.ptd_file import PtdEntry, PtdFile, read_ptd
from ptebuild.runtime.pte_file import PteFile, read_pte

__all__ = [
    "CheckedFiles",
    "PtdEntry",
    "PtdFile",
    "PteFile",
    "VerifiedProgram",
    "check",
    "load",
    "read_ptd",
    "read_pte",
]
