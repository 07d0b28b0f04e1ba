"""Test support shipped with chronos_trio: the store conformance suite,
fault-injection helpers, a store with only the core (``MinimalStore``) and a
MemoryStore whose records can be damaged (``DamageableMemoryStore``), usable
by any project that builds on it."""

from . import (
    _conformance_control,  # noqa: F401 - registers the flow-control checks in CHECKS
    _conformance_history,  # noqa: F401 - registers the attempt history's checks
    _conformance_notes,  # noqa: F401 - registers the notes' (progress, log lines) checks
    _conformance_unclaimed,  # noqa: F401 - registers the unclaimed settle's checks
    _conformance_unique,  # noqa: F401 - registers the unique jobs' run and release checks
    _conformance_workers,  # noqa: F401 - registers the worker registry's checks
)
from .conformance import CHECKS as CHECKS
from .conformance import Check as Check
from .conformance import StoreFactory as StoreFactory
from .damageable import DamageableMemoryStore as DamageableMemoryStore
from .faulty_store import FaultyStore as FaultyStore
from .minimal_store import MinimalStore as MinimalStore
