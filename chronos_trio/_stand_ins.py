"""Stand-in modules for the worker command's import of Trio.

:class:`StandInFinder` answers the import of each of a few module names with
an empty module that a function fills (placeholders, stubs), for as long as
it is in ``sys.meta_path``; :func:`is_stand_in` tells such a module from the
real one. Used by :mod:`chronos_trio._lazy_trio` and
:mod:`chronos_trio._trio_thread_names`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


class StandInLoader:
    """Makes a stand-in module: empty, then filled by ``fill``."""

    def __init__(self, fill: Callable[[ModuleType], None]) -> None:
        self.fill = fill

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = ModuleType(spec.name)
        self.fill(module)
        return module

    @staticmethod
    def exec_module(module: ModuleType) -> None:
        return None


class StandInFinder:
    """Finds a stand-in (made by ``fill``) for each module of ``names``."""

    def __init__(self, names: Collection[str], fill: Callable[[ModuleType], None]) -> None:
        self.names = names
        self.fill = fill

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> ModuleSpec | None:
        if fullname in self.names:
            loader: Any = StandInLoader(self.fill)  # a Loader by protocol (no importlib.abc)
            return ModuleSpec(fullname, loader)
        return None


def is_stand_in(value: object) -> bool:
    """Whether ``value`` is a module a :class:`StandInFinder` made."""
    return isinstance(value, ModuleType) and isinstance(
        getattr(value, "__loader__", None), StandInLoader
    )
