"""The public API: every type that appears in a public signature can be
imported from a public module, and public names report that module.

Found by introspection, not a fixed list: a new public function whose
signature mentions a type only a private module exports fails here."""

from __future__ import annotations

import importlib
import inspect
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

import attrs

import chronos_trio

#: Every public package (no path component starts with an underscore).
PUBLIC_MODULES = (
    "chronos_trio",
    "chronos_trio.app",
    "chronos_trio.worker",
    "chronos_trio.actors",
    "chronos_trio.runtime",
    "chronos_trio.store",
    "chronos_trio.store.memory",
    "chronos_trio.store.redis",
    "chronos_trio.records",
    "chronos_trio.cli",
    "chronos_trio.dashboard",
    "chronos_trio.testing",
    "chronos_trio.producers",
    "chronos_trio.producers.sync",
    "chronos_trio.producers.asyncio",
    "chronos_trio.testing.damage",
    "chronos_trio.integrations.otel",
)


def _ours(obj: object) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] == "chronos_trio"


def _public_path(module: str) -> bool:
    return not any(part.startswith("_") for part in module.split("."))


def exported() -> Iterator[tuple[str, str, Any]]:
    """(module, name, object) for every public name of every public module.
    Every one is loaded before the first is yielded: an annotation may name
    a type its module imports for type checkers only (one imported on first
    use, or redis-py's, which a worker does not import), found in the
    globals of a module that imports it for real."""
    found = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        for name in names:
            obj = getattr(module, name)  # loads a lazy name (PEP 562)
            if isinstance(obj, types.ModuleType) or not _ours(obj):
                continue
            if isinstance(obj, type) or callable(obj):
                found.append((module_name, name, obj))
    yield from found


def _namespace() -> dict[str, Any]:
    """Every chronos_trio module's globals: public objects report their public
    module, but their string annotations name things of the private one."""
    # Standard-library types our modules import for type checking only (to
    # keep them out of a worker's start-up): zoneinfo's, in runtime._schedule.
    from zoneinfo import ZoneInfo

    merged: dict[str, Any] = {"ZoneInfo": ZoneInfo}
    for name, module in list(sys.modules.items()):
        if name == "chronos_trio" or name.startswith("chronos_trio."):
            merged.update(vars(module))
    return merged


def _hints(obj: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, globalns=_namespace())
    except (NameError, TypeError) as exc:  # pragma: no cover - shown by the assert
        raise AssertionError(f"cannot resolve the annotations of {obj!r}: {exc}") from exc


def _signatures(obj: Any) -> Iterator[tuple[str, Any]]:
    """(where, annotation) for each annotation of a public callable or class."""
    if isinstance(obj, type):
        if attrs.has(obj):
            for field, hint in _hints(obj).items():
                if not field.startswith("_"):
                    yield f"{obj.__qualname__}.{field}", hint
        for attr, member in vars(obj).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            target = member.fget if isinstance(member, property) else member
            if isinstance(target, classmethod | staticmethod):
                target = target.__func__
            if inspect.isfunction(target):
                for param, hint in _hints(target).items():
                    yield f"{obj.__qualname__}.{attr}({param})", hint
    elif inspect.isfunction(obj):
        for param, hint in _hints(obj).items():
            yield f"{obj.__qualname__}({param})", hint


def _classes_in(hint: Any) -> Iterator[type]:
    if isinstance(hint, type) and _ours(hint):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)
    origin = typing.get_origin(hint)
    if isinstance(origin, type) and _ours(origin):
        yield origin


def test_every_type_in_a_public_signature_is_importable_from_a_public_module() -> None:
    missing: dict[str, set[str]] = {}
    for module_name, _name, obj in exported():
        for where, hint in _signatures(obj):
            for cls in _classes_in(hint):
                home = sys.modules.get(cls.__module__)
                reachable = (
                    _public_path(cls.__module__)
                    and home is not None
                    and getattr(home, cls.__qualname__.split(".")[0], None) is not None
                )
                if not reachable:
                    missing.setdefault(f"{cls.__module__}.{cls.__qualname__}", set()).add(
                        f"{module_name}.{where}"
                    )
    assert not missing, "\n".join(f"{c} (used by {sorted(u)[:3]})" for c, u in missing.items())


def test_public_names_report_their_public_module() -> None:
    wrong = [
        f"{module}.{name} reports {obj.__module__}"
        for module, name, obj in exported()
        if not _public_path(obj.__module__)
    ]
    assert not wrong, wrong
    assert chronos_trio.Worker.__module__ == "chronos_trio"
    assert repr(chronos_trio.JobState.READY) == "<JobState.READY: 'ready'>"


def test_no_public_attribute_is_a_private_module() -> None:
    leaked = [
        f"{module_name}.{name}"
        for module_name in PUBLIC_MODULES
        for name, value in vars(importlib.import_module(module_name)).items()
        if not name.startswith("_")
        and isinstance(value, types.ModuleType)
        and not _public_path(value.__name__)
    ]
    assert not leaked, leaked


def _chronos_types(hint: Any) -> Iterator[type]:
    if isinstance(hint, type) and hint.__module__.startswith("chronos_trio"):
        yield hint
    for arg in typing.get_args(hint):
        yield from _chronos_types(arg)


def test_every_type_a_store_role_takes_or_returns_is_in_the_api_reference() -> None:
    """Issue 24: a backend is written from the reference alone, so every
    chronos_trio type in a role method's signature (its parameters and its
    frozen result) has an entry (``::: module.Name``) in docs/reference/."""
    import re
    from pathlib import Path

    from chronos_trio.store import ROLES, _roles

    _roles.load_lazy_types()  # the types a worker does not load (search, the checker's)
    reference = "\n".join(
        p.read_text() for p in (Path(__file__).parent.parent / "docs" / "reference").glob("*.md")
    )
    documented = set(re.findall(r"^::: [\w.]+\.(\w+)\s*$", reference, re.MULTILINE))
    used: dict[str, str] = {}
    for role in ROLES:
        for name, method in inspect.getmembers(role, inspect.isfunction):
            if name.startswith("_"):
                continue
            for hint in typing.get_type_hints(method).values():
                for found in _chronos_types(hint):
                    used.setdefault(found.__name__, f"{role.__name__}.{name}")
    assert len(used) > 10  # the walk found the contract's types
    missing = {n: where for n, where in used.items() if n not in documented}
    assert not missing, f"role types with no API reference entry: {missing}"
