"""chronos_trio: reliable distributed delayed jobs on Redis, built on Trio."""

from ._app import App as App
from ._app import open_store as open_store
from ._config import WorkerConfig as WorkerConfig
from ._config import parse_queues as parse_queues
from ._context import JobContext as JobContext
from ._errors import ActorFailed as ActorFailed
from ._errors import ChronosError as ChronosError
from ._errors import PayloadError as PayloadError
from ._errors import SkipRetry as SkipRetry
from ._errors import StoreError as StoreError
from ._errors import TopologyError as TopologyError
from ._errors import UnknownTask as UnknownTask
from ._inspector import ActionRefused as ActionRefused
from ._inspector import Inspector as Inspector
from ._inspector import UnknownJob as UnknownJob
from ._inspector import UnknownQueue as UnknownQueue
from ._job import EnqueueResult as EnqueueResult
from ._job import Job as Job
from ._job import JobState as JobState
from ._job import NewJob as NewJob
from ._retry import RetryPolicy as RetryPolicy
from ._schedule import Schedule as Schedule
from ._schedule import ScheduleInfo as ScheduleInfo
from ._schedule import leadership_name as leadership_name
from ._schedule import schedule_rows as schedule_rows
from ._task import Task as Task
from ._worker import ACTORS as ACTORS
from ._worker import Worker as Worker
from ._worker import WorkerStatistics as WorkerStatistics
from .store import Leadership as Leadership
from .store import MemoryStore as MemoryStore
from .store import QueueWeight as QueueWeight
from .store import Store as Store

__version__ = "0.1.0"
