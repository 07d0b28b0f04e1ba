"""The bottom layer: job records, errors, the payload codec, retry policy and
job options. Every other layer may import it; it imports none of them."""

from typing import TYPE_CHECKING

from ._attempts import HISTORY_LIMIT as HISTORY_LIMIT
from ._attempts import Attempt as Attempt
from ._attempts import AttemptOutcome as AttemptOutcome
from ._control import ConcurrencyLimit as ConcurrencyLimit
from ._control import ControlDefaults as ControlDefaults
from ._control import JobControl as JobControl
from ._control import RateLimit as RateLimit
from ._errors import ActionRefused as ActionRefused
from ._errors import ActorFailed as ActorFailed
from ._errors import ChronosError as ChronosError
from ._errors import DuplicateJob as DuplicateJob
from ._errors import InspectorError as InspectorError
from ._errors import IsolationError as IsolationError
from ._errors import JobAborted as JobAborted
from ._errors import JobCancelled as JobCancelled
from ._errors import JobError as JobError
from ._errors import JobFailed as JobFailed
from ._errors import JobNotFound as JobNotFound
from ._errors import PayloadError as PayloadError
from ._errors import RateLimited as RateLimited
from ._errors import ResultExpired as ResultExpired
from ._errors import ResultNotKeptWarning as ResultNotKeptWarning
from ._errors import ResultTimeout as ResultTimeout
from ._errors import Retry as Retry
from ._errors import ScheduleAlreadyStored as ScheduleAlreadyStored
from ._errors import ScheduleNotStored as ScheduleNotStored
from ._errors import SkipRetry as SkipRetry
from ._errors import SoftTimeLimit as SoftTimeLimit
from ._errors import StoreError as StoreError
from ._errors import TopologyError as TopologyError
from ._errors import UnknownJob as UnknownJob
from ._errors import UnknownQueue as UnknownQueue
from ._errors import UnknownTask as UnknownTask
from ._flow_outcomes import BatchSummary as BatchSummary
from ._flow_outcomes import MemberOutcome as MemberOutcome
from ._flow_outcomes import StepFailure as StepFailure
from ._history import attempt_history as attempt_history
from ._jobs import FINISHED_STATES as FINISHED_STATES
from ._jobs import PENDING_STATES as PENDING_STATES
from ._jobs import EnqueueResult as EnqueueResult
from ._jobs import Job as Job
from ._jobs import JobOutcome as JobOutcome
from ._jobs import JobRef as JobRef
from ._jobs import JobState as JobState
from ._jobs import LeasedJob as LeasedJob
from ._jobs import LeaseRef as LeaseRef
from ._jobs import NewJob as NewJob
from ._notes import MAX_LINE_CHARS as MAX_LINE_CHARS
from ._notes import MAX_NOTE_LINES as MAX_NOTE_LINES
from ._notes import MAX_PROGRESS_MESSAGE as MAX_PROGRESS_MESSAGE
from ._notes import JobNotes as JobNotes
from ._notes import JobProgress as JobProgress
from ._notes import NoteLine as NoteLine
from ._notes import NoteWrite as NoteWrite
from ._notes import Progress as Progress
from ._options import EnqueueOptions as EnqueueOptions
from ._options import JobDefaults as JobDefaults
from ._placement import NO_PLACEMENT as NO_PLACEMENT
from ._placement import Placement as Placement
from ._public import fixup_module_metadata as _fixup
from ._public import lazy_getattr as _lazy_getattr
from ._retry import RetryPolicy as RetryPolicy
from ._unique import Unique as Unique
from ._workers import WorkerInfo as WorkerInfo
from ._workflow import Arrival as Arrival

if TYPE_CHECKING:
    from ._aggregates import KindCounts as KindCounts
    from ._aggregates import MinuteCounts as MinuteCounts
    from ._flow_build import Buildable as Buildable
    from ._flow_build import Chain as Chain
    from ._flow_build import Dag as Dag
    from ._flow_build import DagStep as DagStep
    from ._flow_build import FlowStep as FlowStep
    from ._flow_build import Group as Group
    from ._flow_build import chain as chain
    from ._flow_build import group as group
    from ._flow_control import FlowNode as FlowNode
    from ._flow_control import StepView as StepView
    from ._flow_control import WorkflowAbortResult as WorkflowAbortResult
    from ._flow_control import WorkflowRecord as WorkflowRecord
    from ._flow_control import WorkflowState as WorkflowState
    from ._flow_control import WorkflowView as WorkflowView
    from ._flow_start import WorkflowStart as WorkflowStart
    from ._graph import Graph as Graph
    from ._graph import graph as graph

_fixup(__name__, globals())
del _fixup
#: Loaded on first use, each with the other names of its module: what builds
#: and starts a workflow (a worker that starts none never needs it); a workflow's
#: record and what controlling it reports (a worker, which only runs a
#: workflow's steps, never needs them); the per-minute aggregates' records
#: (built when a worker's aggregator first writes, read by the dashboard).
_LAZY = {
    **dict.fromkeys(
        (
            "FlowNode",
            "StepView",
            "WorkflowAbortResult",
            "WorkflowRecord",
            "WorkflowState",
            "WorkflowView",
        ),
        "_flow_control",
    ),
    "Buildable": "_flow_build",
    "Chain": "_flow_build",
    "Dag": "_flow_build",
    "DagStep": "_flow_build",
    "FlowStep": "_flow_build",
    "Group": "_flow_build",
    "chain": "_flow_build",
    "group": "_flow_build",
    "WorkflowStart": "_flow_start",
    "Graph": "_graph",
    "graph": "_graph",
    "KindCounts": "_aggregates",
    "MinuteCounts": "_aggregates",
}
__all__ = [n for n in globals() if not n.startswith("_") and n != "TYPE_CHECKING"] + list(_LAZY)
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)
