"""The worker: assembles the actors of one process into a supervised tree
and runs its graceful shutdown."""

from ..records._public import fixup_module_metadata as _fixup
from ._worker import ACTORS as ACTORS
from ._worker import Worker as Worker
from ._worker import WorkerStatistics as WorkerStatistics

_fixup(__name__, globals())
del _fixup
