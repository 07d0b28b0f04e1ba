"""The command line, ``python -m chronos_trio COMMAND`` (also ``chronos-trio``):
the worker command and its process manager, admin commands, the demo.

Modules: ``_main`` builds the parser from the command modules (``_worker_command``,
``_admin``), which share ``_options`` (exit codes, :class:`CliError`, option
types) and ``_loading`` (APP import, store URL); ``_output`` renders tables
and JSON; ``_process_manager`` supervises worker processes; ``_logs`` sets up
log lines.
"""

from ..records._public import fixup_module_metadata as _fixup
from ._main import main as main
from ._options import EXIT_BAD_URL as EXIT_BAD_URL
from ._options import EXIT_FAILURE as EXIT_FAILURE
from ._options import EXIT_INTERRUPTED as EXIT_INTERRUPTED
from ._options import EXIT_NO_APP as EXIT_NO_APP
from ._options import EXIT_NOT_FOUND as EXIT_NOT_FOUND
from ._options import EXIT_OK as EXIT_OK
from ._options import EXIT_PROBLEMS as EXIT_PROBLEMS
from ._options import EXIT_REFUSED as EXIT_REFUSED
from ._options import EXIT_RESTARTS as EXIT_RESTARTS
from ._options import EXIT_UNAVAILABLE as EXIT_UNAVAILABLE
from ._options import EXIT_USAGE as EXIT_USAGE
from ._options import CliError as CliError
from ._process_manager import ChildStatistics as ChildStatistics
from ._process_manager import ManagerStatistics as ManagerStatistics
from ._process_manager import ProcessManager as ProcessManager

_fixup(__name__, globals())
del _fixup
