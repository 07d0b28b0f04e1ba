"""chronos_trio: reliable distributed delayed jobs on Redis, built on Trio.

Layers, each importing only those below it (``pyproject.toml`` holds the
import-linter contract that enforces it)::

    cli       command line, process manager, demo         chronos_trio.cli
    app       App, Task handles, Inspector                chronos_trio.app
    worker    the supervised actor tree of one process    chronos_trio.worker
    actors    one module per actor                        chronos_trio.actors
    runtime   registry, config, in-flight table, events   chronos_trio.runtime
    store     role protocols, schemes, memory, redis      chronos_trio.store
    records   jobs, errors, codec, retry policy           chronos_trio.records

Beside ``app``, ``producers`` enqueues and follows jobs from code that does
not run Trio (threads, asyncio): ``chronos_trio.producers``.

Importing the package is cheap and does not import Trio: the records (jobs
and errors) load at once, every other public name on first use (PEP 562),
with the other names of its module. ``import chronos_trio.producers`` relies
on it, and a worker never loads what it does not use (the Inspector, what
builds a workflow, its record and views, the in-memory store of a worker on
Redis).
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

# First, before anything else is imported: ``_collector`` holds the cyclic
# collector off when the process is the command line, and ``_code_cache``
# (which imports it first) hooks a worker's cache of the code attrs compiles
# before any attrs class is defined, and ``_lazy_trio`` imports a worker's
# Trio without the parts it does not use at start (each a no-op for any other
# importer of the package or command).
from . import _code_cache as _code_cache
from . import _collector as _collector
from . import _lazy_trio as _lazy_trio

if _code_cache.launched_as_worker():
    _lazy_trio.install()

from .records import HISTORY_LIMIT as HISTORY_LIMIT
from .records import NO_PLACEMENT as NO_PLACEMENT
from .records import ActionRefused as ActionRefused
from .records import ActorFailed as ActorFailed
from .records import Attempt as Attempt
from .records import AttemptOutcome as AttemptOutcome
from .records import BatchSummary as BatchSummary
from .records import ChronosError as ChronosError
from .records import ConcurrencyLimit as ConcurrencyLimit
from .records import DuplicateJob as DuplicateJob
from .records import EnqueueResult as EnqueueResult
from .records import InspectorError as InspectorError
from .records import IsolationError as IsolationError
from .records import Job as Job
from .records import JobAborted as JobAborted
from .records import JobCancelled as JobCancelled
from .records import JobControl as JobControl
from .records import JobError as JobError
from .records import JobFailed as JobFailed
from .records import JobNotes as JobNotes
from .records import JobNotFound as JobNotFound
from .records import JobOutcome as JobOutcome
from .records import JobProgress as JobProgress
from .records import JobRef as JobRef
from .records import JobState as JobState
from .records import LeasedJob as LeasedJob
from .records import LeaseRef as LeaseRef
from .records import MemberOutcome as MemberOutcome
from .records import NewJob as NewJob
from .records import NoteLine as NoteLine
from .records import PayloadError as PayloadError
from .records import Placement as Placement
from .records import Progress as Progress
from .records import RateLimit as RateLimit
from .records import RateLimited as RateLimited
from .records import ResultExpired as ResultExpired
from .records import ResultNotKeptWarning as ResultNotKeptWarning
from .records import ResultTimeout as ResultTimeout
from .records import Retry as Retry
from .records import RetryPolicy as RetryPolicy
from .records import ScheduleAlreadyStored as ScheduleAlreadyStored
from .records import ScheduleNotStored as ScheduleNotStored
from .records import SkipRetry as SkipRetry
from .records import SoftTimeLimit as SoftTimeLimit
from .records import StepFailure as StepFailure
from .records import StoreError as StoreError
from .records import TopologyError as TopologyError
from .records import Unique as Unique
from .records import UnknownJob as UnknownJob
from .records import UnknownQueue as UnknownQueue
from .records import UnknownTask as UnknownTask
from .records import WorkerInfo as WorkerInfo
from .records import attempt_history as attempt_history
from .records._version import VERSION as _VERSION

if _TYPE_CHECKING:
    from .app import App as App
    from .app import Batch as Batch
    from .app import BatchStatus as BatchStatus
    from .app import BulkAction as BulkAction
    from .app import BulkProgress as BulkProgress
    from .app import BulkResult as BulkResult
    from .app import DynamicSchedules as DynamicSchedules
    from .app import GroupEnd as GroupEnd
    from .app import Inspector as Inspector
    from .app import JobHandle as JobHandle
    from .app import JobPage as JobPage
    from .app import LimitInfo as LimitInfo
    from .app import QueueInfo as QueueInfo
    from .app import ScheduleInfo as ScheduleInfo
    from .app import Task as Task
    from .app import TaskDecorator as TaskDecorator
    from .app import VersionInfo as VersionInfo
    from .app import Workflow as Workflow
    from .app import schedule_rows as schedule_rows
    from .records import Chain as Chain
    from .records import Dag as Dag
    from .records import FlowNode as FlowNode
    from .records import FlowStep as FlowStep
    from .records import Graph as Graph
    from .records import Group as Group
    from .records import StepView as StepView
    from .records import WorkflowAbortResult as WorkflowAbortResult
    from .records import WorkflowRecord as WorkflowRecord
    from .records import WorkflowState as WorkflowState
    from .records import WorkflowView as WorkflowView
    from .records import chain as chain
    from .records import graph as graph
    from .records import group as group
    from .runtime import JobContext as JobContext
    from .runtime import JobMetric as JobMetric
    from .runtime import Metrics as Metrics
    from .runtime import MetricsBase as MetricsBase
    from .runtime import Recycled as Recycled
    from .runtime import Registry as Registry
    from .runtime import Schedule as Schedule
    from .runtime import StoredEntry as StoredEntry
    from .runtime import TaskSpec as TaskSpec
    from .runtime import WorkerConfig as WorkerConfig
    from .runtime import WorkerHost as WorkerHost
    from .runtime import leadership_name as leadership_name
    from .runtime import parse_queues as parse_queues
    from .runtime import zoned_time as zoned_time
    from .store import AbortResult as AbortResult
    from .store import JobQuery as JobQuery
    from .store import Leadership as Leadership
    from .store import MemoryStore as MemoryStore
    from .store import QueueWeight as QueueWeight
    from .store import SearchPage as SearchPage
    from .store import Store as Store
    from .store import TimeRange as TimeRange
    from .store import open_store as open_store
    from .worker import ACTORS as ACTORS
    from .worker import Worker as Worker
    from .worker import WorkerStatistics as WorkerStatistics

__version__ = _VERSION

#: The public names loaded on first use, and the subpackage of each.
_LAZY = {
    "Chain": "records._flow_build",
    "Dag": "records._flow_build",
    "FlowStep": "records._flow_build",
    "Group": "records._flow_build",
    "chain": "records._flow_build",
    "group": "records._flow_build",
    "FlowNode": "records._flow_control",
    "Graph": "records._graph",
    "graph": "records._graph",
    "StepView": "records._flow_control",
    "WorkflowAbortResult": "records._flow_control",
    "WorkflowRecord": "records._flow_control",
    "WorkflowState": "records._flow_control",
    "WorkflowView": "records._flow_control",
    "App": "app",
    "DynamicSchedules": "app",
    "BulkAction": "app._bulk",
    "BulkProgress": "app._bulk",
    "BulkResult": "app._bulk",
    "JobHandle": "app",
    "Workflow": "app",
    "GroupEnd": "app",
    "Batch": "app",
    "BatchStatus": "app",
    "Task": "app",
    "TaskDecorator": "app",
    "Inspector": "app._inspector",
    "JobPage": "app._inspector",
    "QueueInfo": "app._inspector",
    "LimitInfo": "app._inspector",
    "ScheduleInfo": "app._inspector",
    "VersionInfo": "app._inspector",
    "schedule_rows": "app._inspector",
    "JobContext": "runtime",
    "JobMetric": "runtime._metrics_feed",
    "Metrics": "runtime",
    "MetricsBase": "runtime",
    "Recycled": "runtime",
    "Registry": "runtime",
    "Schedule": "runtime",
    "StoredEntry": "runtime",
    "TaskSpec": "runtime",
    "WorkerConfig": "runtime",
    "WorkerHost": "runtime",
    "leadership_name": "runtime",
    "parse_queues": "runtime",
    "zoned_time": "runtime",
    "AbortResult": "store",
    "JobQuery": "store",
    "SearchPage": "store",
    "TimeRange": "store",
    "Leadership": "store",
    "MemoryStore": "store.memory",
    "QueueWeight": "store",
    "Store": "store",
    "open_store": "store",
    "ACTORS": "worker",
    "Worker": "worker",
    "WorkerStatistics": "worker",
}

__all__ = [
    "ActionRefused",
    "ActorFailed",
    "Attempt",
    "AttemptOutcome",
    "ChronosError",
    "ConcurrencyLimit",
    "DuplicateJob",
    "EnqueueResult",
    "HISTORY_LIMIT",
    "InspectorError",
    "IsolationError",
    "Job",
    "JobAborted",
    "JobCancelled",
    "JobControl",
    "JobError",
    "JobFailed",
    "JobNotFound",
    "ScheduleAlreadyStored",
    "ScheduleNotStored",
    "JobOutcome",
    "JobRef",
    "JobState",
    "LeasedJob",
    "LeaseRef",
    "NO_PLACEMENT",
    "NewJob",
    "PayloadError",
    "Placement",
    "RateLimit",
    "RateLimited",
    "ResultExpired",
    "ResultNotKeptWarning",
    "ResultTimeout",
    "Retry",
    "RetryPolicy",
    "SkipRetry",
    "SoftTimeLimit",
    "StoreError",
    "TopologyError",
    "Unique",
    "MemberOutcome",
    "StepFailure",
    "BatchSummary",
    "UnknownJob",
    "UnknownQueue",
    "UnknownTask",
    "WorkerInfo",
    "attempt_history",
    *_LAZY,
]

from .records._public import fixup_module_metadata as _fixup  # noqa: E402
from .records._public import lazy_getattr as _lazy_getattr  # noqa: E402

_fixup(__name__, globals())
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
