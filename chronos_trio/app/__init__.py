"""The facade every entry point starts from: the App (store, tasks,
schedules), task handles for producers, and the Inspector."""

from ..records._public import fixup_module_metadata as _fixup
from ._app import App as App
from ._handle import HandleHost as HandleHost
from ._handle import JobHandle as JobHandle
from ._handle import Workflow as Workflow
from ._inspector import Inspector as Inspector
from ._inspector import JobPage as JobPage
from ._inspector import QueueInfo as QueueInfo
from ._inspector import ScheduleInfo as ScheduleInfo
from ._inspector import VersionInfo as VersionInfo
from ._inspector import schedule_rows as schedule_rows
from ._task import JobSink as JobSink
from ._task import Task as Task

_fixup(__name__, globals())
del _fixup
