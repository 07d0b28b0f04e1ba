"""One worker process's runtime pieces, below the actors: the task registry,
schedules, configuration, the job context, the in-flight table, the
plain handlers' threads, the isolated handlers' child processes, the
supervisor and its restart window, and the state the actors share. It imports only ``store`` and
``records``; the App hands a worker its registry and store as a
:class:`WorkerHost`."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..records._public import fixup_module_metadata as _fixup
from ..records._public import lazy_getattr as _lazy_getattr
from ._aggregates import AggregatesStatistics as AggregatesStatistics
from ._aggregates import AggregateTally as AggregateTally
from ._config import WorkerConfig as WorkerConfig
from ._config import parse_queues as parse_queues
from ._context import JobContext as JobContext
from ._context import LeaseStatus as LeaseStatus
from ._context import Producer as Producer
from ._events import ActorRestarted as ActorRestarted
from ._events import Event as Event
from ._events import EventBus as EventBus
from ._events import JobAbortApplied as JobAbortApplied
from ._events import JobDead as JobDead
from ._events import JobReleased as JobReleased
from ._events import JobRetried as JobRetried
from ._events import JobsRecovered as JobsRecovered
from ._events import JobSucceeded as JobSucceeded
from ._events import LeaseLost as LeaseLost
from ._events import NotesWritten as NotesWritten
from ._events import Subscriber as Subscriber
from ._events import Subscription as Subscription
from ._inflight import Entry as Entry
from ._inflight import IllegalTransition as IllegalTransition
from ._inflight import InFlight as InFlight
from ._inflight import Stage as Stage
from ._metrics import Metrics as Metrics
from ._metrics import MetricsBase as MetricsBase
from ._metrics import RoundTripTally as RoundTripTally
from ._notes import NotesBuffer as NotesBuffer
from ._notes import NotesStatistics as NotesStatistics
from ._recycle import Recycle as Recycle
from ._recycle import Recycled as Recycled
from ._registry import DeadLetterHook as DeadLetterHook
from ._registry import Lifespan as Lifespan
from ._registry import Middleware as Middleware
from ._registry import Registry as Registry
from ._registry import WorkerHost as WorkerHost
from ._restarts import RestartWindow as RestartWindow
from ._schedule import JobDefaultsOf as JobDefaultsOf
from ._schedule import MisfirePolicy as MisfirePolicy
from ._schedule import Schedule as Schedule
from ._schedule import leadership_name as leadership_name
from ._schedule import trigger_job_id as trigger_job_id
from ._schedule import zoned_time as zoned_time
from ._state import Counters as Counters
from ._state import Runtime as Runtime
from ._stored_schedules import StoredEntry as StoredEntry
from ._tasks import DEFAULT_RESULT_TTL as DEFAULT_RESULT_TTL
from ._tasks import Handler as Handler
from ._tasks import TaskSpec as TaskSpec
from ._threads import HandlerThreads as HandlerThreads
from ._threads import ThreadRun as ThreadRun
from ._unknown_kinds import UnknownKinds as UnknownKinds

if _TYPE_CHECKING:
    from ._isolation import ChildPool as ChildPool
    from ._isolation import ChildPoolStatistics as ChildPoolStatistics
    from ._isolation import IsolatedChild as IsolatedChild
    from ._isolation import IsolationPlan as IsolationPlan
    from ._isolation_wire import ChildNote as ChildNote
    from ._isolation_wire import ChildReply as ChildReply
    from ._job_metric import JobMetric as JobMetric
    from ._metrics_feed import MetricsFeed as MetricsFeed

#: Loaded on first use, each with the other names of its module: the child
#: processes of isolated handlers (``@app.task(isolate=True)``), their wire
#: protocol and records; a worker whose app has no isolated task never
#: imports them; the feed of an app's metrics object and its record (a
#: worker whose app has none never imports them).
_LAZY = {
    "ChildPool": "_isolation",
    "ChildPoolStatistics": "_isolation",
    "IsolatedChild": "_isolation",
    "IsolationPlan": "_isolation",
    "ChildNote": "_isolation_wire",
    "ChildReply": "_isolation_wire",
    "JobMetric": "_metrics_feed",
    "MetricsFeed": "_metrics_feed",
}

_fixup(__name__, globals())
del _fixup
__all__ = [n for n in globals() if not n.startswith("_")] + list(_LAZY)
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)
