"""The command line, ``python -m chronos_trio COMMAND`` (also ``chronos-trio``):
the worker command and its process manager, admin commands, the demo.

Modules: ``_main`` builds the parser from the command modules (``_worker_command``,
``_admin``), which share ``_options`` (exit codes, :class:`CliError`, option
types) and ``_loading`` (APP import, store URL); ``_admin_commands`` runs the
admin commands; ``_output`` renders tables and JSON; ``_process_manager``
supervises worker processes; ``_logs`` sets up log lines.

A command imports only what it runs: the worker command neither the admin
commands nor the process manager (unless ``--processes`` > 1), whose public
names here are imported on first use (PEP 562).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..records._public import fixup_module_metadata as _fixup
from ..records._public import lazy_getattr as _lazy_getattr
from ._main import main as main
from ._options import EXIT_BAD_URL as EXIT_BAD_URL
from ._options import EXIT_FAILURE as EXIT_FAILURE
from ._options import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._options import EXIT_JOB_FAILED as EXIT_JOB_FAILED
from ._options import EXIT_NO_APP as EXIT_NO_APP
from ._options import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from ._options import EXIT_OK as EXIT_OK
from ._options import EXIT_PENDING as EXIT_PENDING
from ._options import EXIT_PROBLEMS as EXIT_PROBLEMS
from ._options import EXIT_RECYCLED as EXIT_RECYCLED
from ._options import EXIT_REFUSED as EXIT_REFUSED
from ._options import EXIT_RESTARTS as EXIT_RESTARTS
from ._options import EXIT_TIMEOUT as EXIT_TIMEOUT
from ._options import EXIT_UNAVAILABLE as EXIT_UNAVAILABLE
from ._options import EXIT_USAGE as EXIT_USAGE
from ._options import CliError as CliError

if _TYPE_CHECKING:
    from ._process_manager import ChildStatistics as ChildStatistics
    from ._process_manager import ManagerStatistics as ManagerStatistics
    from ._process_manager import ProcessManager as ProcessManager

#: The public names imported on first use, and their module.
_LAZY = {
    "ChildStatistics": "_process_manager",
    "ManagerStatistics": "_process_manager",
    "ProcessManager": "_process_manager",
}

_fixup(__name__, globals())
__all__ = [n for n in globals() if not n.startswith("_")] + list(_LAZY)
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY)
del _fixup
