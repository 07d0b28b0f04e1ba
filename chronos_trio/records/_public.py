"""Making public names report their public module (as trio does)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def fixup_module_metadata(module_name: str, namespace: Mapping[str, Any]) -> None:
    """Set ``__module__`` of every chronos_trio class and function that
    ``namespace`` (a package's ``globals()``) exports to ``module_name``, so
    reprs, tracebacks and docs name ``chronos_trio.Worker``, not
    ``chronos_trio.worker._worker.Worker``. An object moves when it lives in
    a private module or below ``module_name``: a name a package exports and
    the top level exports again ends up under the top level (it runs last)."""
    seen: set[int] = set()

    def fix(qualname: str, obj: Any) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or not module.startswith("chronos_trio."):
            return
        private = any(part.startswith("_") for part in module.split("."))
        if not private and not module.startswith(module_name + "."):
            return  # already public, and not below this package
        obj.__module__ = module_name
        if isinstance(obj, type):
            obj.__qualname__ = qualname
            for attr, value in list(vars(obj).items()):
                if not attr.startswith("_") and (isinstance(value, type) or callable(value)):
                    fix(f"{qualname}.{attr}", value)

    for name, obj in namespace.items():
        if not name.startswith("_") and (isinstance(obj, type) or callable(obj)):
            fix(name, obj)


def lazy_getattr(
    module_name: str, namespace: dict[str, Any], names: Mapping[str, str], *, together: bool = True
) -> Callable[[str], object]:
    """A PEP 562 ``__getattr__`` for the package ``module_name`` (whose
    ``globals()`` is ``namespace``): ``names`` maps each lazy public name to
    the submodule (relative, without the dot) that defines it. The first use
    of one imports it (``together``: all of them, so every name reports its
    module the same way however it was reached), binds it in the package and
    reports the package as its module (:func:`fixup_module_metadata`)."""

    def __getattr__(name: str) -> object:
        if name not in names:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        wanted = names if together else {n: m for n, m in names.items() if m == names[name]}
        loaded = {
            n: getattr(importlib.import_module(f".{m}", module_name), n) for n, m in wanted.items()
        }
        namespace.update(loaded)
        fixup_module_metadata(module_name, loaded)
        return loaded[name]

    return __getattr__
