"""Job stores: the protocol every backend implements (a required core and
optional capabilities, and one frozen result per operation), the URL scheme
registry, and the backends (``memory``, ``redis``, ``postgres``), which never
import each other.

``MemoryStore``, search (``JobQuery``, ``SearchPage``, ``TimeRange``) and the
store checker's findings are imported on first use (PEP 562): the store's protocols
serve producers that do not run Trio, and the memory store is built on
Trio."""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from ..records._public import fixup_module_metadata as _fixup
from ..records._public import lazy_getattr as _lazy_getattr
from ._capabilities import FEATURES as FEATURES
from ._capabilities import Capability as Capability
from ._capabilities import MissingCapability as MissingCapability
from ._observer import StoreObserver as StoreObserver
from ._offers import ROLE_CAPABILITIES as ROLE_CAPABILITIES
from ._offers import capabilities_of as capabilities_of
from ._offers import require_capabilities as require_capabilities
from ._partitioning import partition_of as partition_of
from ._partitioning import share_by_weight as share_by_weight
from ._partitioning import share_strictly as share_strictly
from ._results import DAMAGED_RECORD as DAMAGED_RECORD
from ._results import LEASE_GRACE as LEASE_GRACE
from ._results import NOTHING_LEASED as NOTHING_LEASED
from ._results import NOTHING_SET_ASIDE as NOTHING_SET_ASIDE
from ._results import AbortResult as AbortResult
from ._results import AsideEntry as AsideEntry
from ._results import CountResult as CountResult
from ._results import Leadership as Leadership
from ._results import LeaseResult as LeaseResult
from ._results import LimitUsage as LimitUsage
from ._results import NotesResult as NotesResult
from ._results import PromoteResult as PromoteResult
from ._results import QueueStats as QueueStats
from ._results import QueueTopology as QueueTopology
from ._results import QueueVersion as QueueVersion
from ._results import QueueWeight as QueueWeight
from ._results import RecoverResult as RecoverResult
from ._results import RenewResult as RenewResult
from ._results import ScheduleEdit as ScheduleEdit
from ._results import SetAside as SetAside
from ._results import SettleKind as SettleKind
from ._results import Settlement as Settlement
from ._results import SettleResult as SettleResult
from ._results import StoredSchedule as StoredSchedule
from ._results import StoredSchedules as StoredSchedules
from ._results import Successor as Successor
from ._results import TriggerResult as TriggerResult
from ._results import VersionState as VersionState
from ._roles import ROLES as ROLES
from ._roles import AdminRole as AdminRole
from ._roles import AggregatesRole as AggregatesRole
from ._roles import CheckRole as CheckRole
from ._roles import Continuation as Continuation
from ._roles import FlowRole as FlowRole
from ._roles import GroupStatus as GroupStatus
from ._roles import LeadershipRole as LeadershipRole
from ._roles import NotesRole as NotesRole
from ._roles import PromotionRole as PromotionRole
from ._roles import RegistryRole as RegistryRole
from ._roles import ResultRole as ResultRole
from ._roles import ScheduleStoreRole as ScheduleStoreRole
from ._roles import SearchRole as SearchRole
from ._roles import Store as Store
from ._roles import StoreError as StoreError
from ._roles import StoreRole as StoreRole
from ._roles import TopologyError as TopologyError
from ._roles import TopologyRole as TopologyRole
from ._roles import WorkerRole as WorkerRole
from ._roles import WorkflowRole as WorkflowRole
from ._roles import require_roles as require_roles
from ._roles import roles_of as roles_of
from ._schemes import Scheme as Scheme
from ._schemes import open_store as open_store
from ._schemes import redact as redact
from ._schemes import register_scheme as register_scheme
from ._schemes import scheme_of as scheme_of
from ._schemes import schemes as schemes
from ._transactional import TransactionalEnqueue as TransactionalEnqueue

if _TYPE_CHECKING:
    from ._check_results import CheckReport as CheckReport
    from ._check_results import Finding as Finding
    from ._check_results import Problem as Problem
    from ._check_results import Repair as Repair
    from ._search import JobQuery as JobQuery
    from ._search import SearchPage as SearchPage
    from ._search import TimeRange as TimeRange
    from .memory import MemoryStore as MemoryStore

#: Loaded on first use, each with the other names of its module: a worker
#: needs none of them (the in-memory store of a worker on Redis, search, the
#: store checker's findings).
_LAZY = {
    "MemoryStore": "memory",
    "CheckReport": "_check_results",
    "Finding": "_check_results",
    "Problem": "_check_results",
    "Repair": "_check_results",
    "finding_order": "_check_results",
    "JobQuery": "_search",
    "SearchPage": "_search",
    "TimeRange": "_search",
}

_fixup(__name__, globals())
__all__ = [n for n in globals() if not n.startswith("_")] + [
    n for n in _LAZY if n != "finding_order"
]
__getattr__ = _lazy_getattr(__name__, globals(), _LAZY, together=False)
