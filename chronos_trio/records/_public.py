"""Making public names report their public module (as trio does)."""

from __future__ import annotations

from collections.abc import Mapping
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
