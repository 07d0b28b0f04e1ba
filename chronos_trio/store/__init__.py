"""Job stores: the protocol every backend implements (a required core and
optional capabilities), the URL scheme registry, and the backends
(``memory``, ``redis``).

``MemoryStore`` is imported on first use (PEP 562): the store's protocols
and the Redis backend's sans-IO core serve producers that do not run Trio,
and the memory store is built on it."""

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
from ._roles import DAMAGED_RECORD as DAMAGED_RECORD
from ._roles import LEASE_GRACE as LEASE_GRACE
from ._roles import NOTHING_SET_ASIDE as NOTHING_SET_ASIDE
from ._roles import ROLES as ROLES
from ._roles import AbortResult as AbortResult
from ._roles import AdminRole as AdminRole
from ._roles import AsideEntry as AsideEntry
from ._roles import CheckReport as CheckReport
from ._roles import CheckRole as CheckRole
from ._roles import Continuation as Continuation
from ._roles import CountResult as CountResult
from ._roles import FencedResults as FencedResults
from ._roles import Finding as Finding
from ._roles import FlowRole as FlowRole
from ._roles import Leadership as Leadership
from ._roles import LeadershipRole as LeadershipRole
from ._roles import LeaseBatch as LeaseBatch
from ._roles import LimitUsage as LimitUsage
from ._roles import Problem as Problem
from ._roles import PromoteResult as PromoteResult
from ._roles import PromotionRole as PromotionRole
from ._roles import QueueStats as QueueStats
from ._roles import QueueTopology as QueueTopology
from ._roles import QueueVersion as QueueVersion
from ._roles import QueueWeight as QueueWeight
from ._roles import RecoverResult as RecoverResult
from ._roles import RegistryRole as RegistryRole
from ._roles import Repair as Repair
from ._roles import ResultRole as ResultRole
from ._roles import SetAside as SetAside
from ._roles import SettleKind as SettleKind
from ._roles import Settlement as Settlement
from ._roles import Store as Store
from ._roles import StoreError as StoreError
from ._roles import StoreRole as StoreRole
from ._roles import TopologyError as TopologyError
from ._roles import TopologyRole as TopologyRole
from ._roles import TriggerResult as TriggerResult
from ._roles import VersionState as VersionState
from ._roles import WorkerRole as WorkerRole
from ._roles import aborted_of as aborted_of
from ._roles import aside_of as aside_of
from ._roles import require_roles as require_roles
from ._roles import roles_of as roles_of
from ._roles import unclaimed_dead_of as unclaimed_dead_of
from ._schemes import Scheme as Scheme
from ._schemes import open_store as open_store
from ._schemes import redact as redact
from ._schemes import register_scheme as register_scheme
from ._schemes import scheme_of as scheme_of
from ._schemes import schemes as schemes

if _TYPE_CHECKING:
    from .memory import MemoryStore as MemoryStore

_fixup(__name__, globals())
__all__ = [n for n in globals() if not n.startswith("_")] + ["MemoryStore"]
__getattr__ = _lazy_getattr(__name__, globals(), {"MemoryStore": "memory"})
