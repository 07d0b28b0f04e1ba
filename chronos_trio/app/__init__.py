"""The facade every entry point starts from: the App (store, tasks,
schedules), task handles for producers, and the Inspector."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..records._public import fixup_module_metadata as _fixup
from ..records._public import lazy_getattr as _lazy_getattr
from ..records._workers import WorkerInfo as WorkerInfo
from ._app import App as App
from ._batch import Batch as Batch
from ._batch import BatchStatus as BatchStatus
from ._dynamic_schedules import DynamicSchedules as DynamicSchedules
from ._handle import GroupEnd as GroupEnd
from ._handle import HandleHost as HandleHost
from ._handle import JobHandle as JobHandle
from ._handle import Workflow as Workflow
from ._task import JobSink as JobSink
from ._task import Task as Task
from ._task import TaskDecorator as TaskDecorator

if _TYPE_CHECKING:
    from ._bulk import BulkAction as BulkAction
    from ._bulk import BulkProgress as BulkProgress
    from ._bulk import BulkResult as BulkResult
    from ._inspector import Inspector as Inspector
    from ._inspector import JobPage as JobPage
    from ._inspector import LimitInfo as LimitInfo
    from ._inspector import QueueInfo as QueueInfo
    from ._inspector import ScheduleInfo as ScheduleInfo
    from ._inspector import VersionInfo as VersionInfo
    from ._inspector import schedule_rows as schedule_rows

#: The Inspector's names, imported on first use (PEP 562): a worker never needs them.
_LAZY = {
    "BulkAction": "_bulk",
    "BulkProgress": "_bulk",
    "BulkResult": "_bulk",
    "Inspector": "_inspector",
    "JobPage": "_inspector",
    "QueueInfo": "_inspector",
    "LimitInfo": "_inspector",
    "ScheduleInfo": "_inspector",
    "VersionInfo": "_inspector",
    "schedule_rows": "_inspector",
}

_fixup(__name__, globals())
__all__ = [n for n in globals() if not n.startswith("_")] + list(_LAZY)
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY)
del _fixup
