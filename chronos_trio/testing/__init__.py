"""Test support shipped with chronos_trio: calling a handler directly
(``run_inline``) with a fake job context, eager mode (``eager``), running
until idle, pytest fixtures (``chronos_trio.testing.pytest_plugin``, opt
in), the store conformance suite, fault-injection helpers, a store with
only the core (``MinimalStore``) and a MemoryStore whose records can be
damaged (``DamageableMemoryStore``), usable by any project that builds on
it."""

from . import (
    _conformance_aggregates,  # noqa: F401 - registers the per-minute aggregates' checks
    _conformance_chain_lease,  # noqa: F401 - registers the handed-over successors' checks
    _conformance_control,  # noqa: F401 - registers the flow-control checks in CHECKS
    _conformance_flow_failures,  # noqa: F401 - registers the workflow failure handling checks
    _conformance_history,  # noqa: F401 - registers the attempt history's checks
    _conformance_keep_outcome,  # noqa: F401 - registers the keep_outcome mark's checks
    _conformance_notes,  # noqa: F401 - registers the notes' (progress, log lines) checks
    _conformance_purge,  # noqa: F401 - registers the queue purge's checks
    _conformance_schedules,  # noqa: F401 - registers the stored schedules' checks
    _conformance_search,  # noqa: F401 - registers job search's checks
    _conformance_unclaimed,  # noqa: F401 - registers the unclaimed settle's checks
    _conformance_unique,  # noqa: F401 - registers the unique jobs' run and release checks
    _conformance_workers,  # noqa: F401 - registers the worker registry's checks
    _conformance_workflows,  # noqa: F401 - registers the workflow records' checks
)
from .app_store import using_store as using_store
from .conformance import CHECKS as CHECKS
from .conformance import Check as Check
from .conformance import StoreFactory as StoreFactory
from .damageable import DamageableMemoryStore as DamageableMemoryStore
from .eager import EagerMode as EagerMode
from .eager import EagerRun as EagerRun
from .eager import eager as eager
from .fake_context import FakeJobContext as FakeJobContext
from .fake_context import FakeLease as FakeLease
from .fake_context import RecordedCall as RecordedCall
from .fake_context import job_context as job_context
from .faulty_store import FaultyStore as FaultyStore
from .idle import run_until_idle as run_until_idle
from .inline import run_inline as run_inline
from .minimal_store import MinimalStore as MinimalStore
