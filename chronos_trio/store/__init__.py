"""Job stores: the :class:`Store` protocol and its backends."""

from ._base import Leadership as Leadership
from ._base import PromoteResult as PromoteResult
from ._base import QueueStats as QueueStats
from ._base import QueueTopology as QueueTopology
from ._base import QueueVersion as QueueVersion
from ._base import QueueWeight as QueueWeight
from ._base import RecoverResult as RecoverResult
from ._base import SettleKind as SettleKind
from ._base import Settlement as Settlement
from ._base import Store as Store
from ._base import StoreError as StoreError
from ._base import TopologyError as TopologyError
from ._base import TriggerResult as TriggerResult
from ._base import VersionState as VersionState
from .memory import MemoryStore as MemoryStore
from .memory import partition_of as partition_of
