"""Reading ``.pte``/``.ptd`` files without executing them, and loading them verified.

Importing this package imports neither torch nor executorch (nor its own readers: the names
below load their module on first use, so ``ptebuild.runtime.record`` stays cheap for a no-op
build); :func:`load` imports ``executorch.runtime`` only once the files have passed their checks.
"""

from __future__ import annotations

from ptebuild.lazy import lazy_exports

_EXPORTS = {
    "CheckedFiles": "loader",
    "VerifiedProgram": "loader",
    "check": "loader",
    "load": "loader",
    "one_data_file": "loader",
    "PtdEntry": "ptd_file",
    "PtdFile": "ptd_file",
    "read_ptd": "ptd_file",
    "PteFile": "pte_file",
    "read_pte": "pte_file",
}

__all__ = sorted(_EXPORTS)

TYPE_CHECKING = False  # what the type checker sees of the table above; nothing is imported at run time
if TYPE_CHECKING:
    from ptebuild.runtime.loader import CheckedFiles as CheckedFiles
    from ptebuild.runtime.loader import VerifiedProgram as VerifiedProgram
    from ptebuild.runtime.loader import check as check
    from ptebuild.runtime.loader import load as load
    from ptebuild.runtime.loader import one_data_file as one_data_file
    from ptebuild.runtime.ptd_file import PtdEntry as PtdEntry
    from ptebuild.runtime.ptd_file import PtdFile as PtdFile
    from ptebuild.runtime.ptd_file import read_ptd as read_ptd
    from ptebuild.runtime.pte_file import PteFile as PteFile
    from ptebuild.runtime.pte_file import read_pte as read_pte


__getattr__ = lazy_exports(__name__, _EXPORTS)
