"""The worker command's Trio, without the parts a worker does not use at start.

``import trio`` imports every part of Trio: TLS streams and helpers (and the
standard library's ``ssl``), DTLS, subprocesses (and ``subprocess``), async
files and paths. A worker on ``redis://`` uses none of them before its first
job, and importing them is about 35M instructions of its start-up (of about
765M). So the worker command (``python -m chronos_trio worker``,
``chronos-trio worker``; nothing for any other importer or command, and
``CHRONOS_LAZY_TRIO=off`` turns it off) imports Trio with those six
submodules (:data:`LAZY`) left out, and loads them on first use:

* while Trio's ``__init__`` (and ``trio.lowlevel``) run, each of the six is
  a stand-in module whose names are placeholders; once ``import trio`` is
  done, the placeholders are taken out of ``trio`` and ``trio.lowlevel``
  (``trio.SSLStream``, ``trio.Path``, ``trio.run_process``,
  ``trio.lowlevel.open_process``, ...) and the stand-ins out of
  ``sys.modules`` and of the package (``trio._ssl``, ...);
* the first reach of any of those names (``trio.<name>``, ``from trio import
  <name>``, ``from trio import *``) imports the six for real, in Trio's own
  order, binds every left-out name to the real object, gives it the public
  ``__module__`` and ``__qualname__`` Trio's ``fixup_module_metadata`` gives
  it at Trio's import, and puts each module's own ``__getattr__`` back: from
  then on both modules are what ``import trio`` makes. ``import trio._ssl``
  (or any of the six) imports that module as usual at any time.

Why it is safe: no other part of Trio imports the six at its import (they
import each other, and the rest of Trio reaches them only through ``trio``'s
names), so no placeholder is ever called; Trio's own ``fixup_module_metadata``
skips them (their ``__module__`` is not ``trio.*``); while the names are left
out, ``dir()`` lists them and ``from trio import *`` binds them (each module
answers ``__all__`` with what its namespace would hold). A Trio that imports
one of the six elsewhere, or binds another kind of name from them, is left
alone: the check (:func:`install`) finds a placeholder anywhere else, or a
stand-in's name used in another way, and imports the six at once.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from . import _trio_thread_names
from ._stand_ins import StandInFinder

#: Trio's submodules a worker does not use before its first job, in the order
#: ``trio/__init__`` imports them.
LAZY = (
    "trio._dtls",
    "trio._file_io",
    "trio._highlevel_ssl_helpers",
    "trio._path",
    "trio._ssl",
    "trio._subprocess",
)

#: Modules the real imports of :data:`LAZY` bind as names of the package
#: (``trio._subprocess`` imports ``trio._subprocess_platform``): left out too.
ALSO_BOUND = ("trio._subprocess_platform",)

#: The modules whose names are taken from :data:`LAZY` at Trio's import.
HOLDERS = ("trio", "trio.lowlevel")

#: The environment variable that turns it off (``off``).
ENV = "CHRONOS_LAZY_TRIO"


class Placeholder:
    """What a stand-in module gives for a name while Trio imports."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name


def _fill_with_placeholders(module: ModuleType) -> None:
    """A stand-in of one of :data:`LAZY`: each of its names a placeholder."""
    name_of_module = module.__name__

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder(name_of_module, name)

    module.__getattr__ = __getattr__  # type: ignore[method-assign]


#: The names left out, by holder: {module name: {name: (lazy module, its
#: name, or "" for the module itself)}}.
_left_out: dict[str, dict[str, tuple[str, str]]] = {}
#: Each holder's ``__getattr__`` before this one (None: it had none).
_previous: dict[str, Callable[[str], Any] | None] = {}
_lock = threading.RLock()
_loading_thread: int | None = None  # the thread in _load_all


def turned_off() -> bool:
    """Whether ``CHRONOS_LAZY_TRIO`` turns it off."""
    return os.environ.get(ENV, "").strip().lower() in ("off", "0", "no")


def install() -> bool:
    """Import Trio with :data:`LAZY` left out (see the module); False when
    turned off or Trio is imported already (nothing done), or when this
    Trio holds a placeholder anywhere but in :data:`HOLDERS` (then the six
    are imported at once and every placeholder replaced: Trio as usual)."""
    if turned_off() or "trio" in sys.modules:
        return False
    finders: list[Any] = [
        StandInFinder(LAZY, _fill_with_placeholders),
        _trio_thread_names.stand_in_finder(),
    ]
    sys.meta_path[:0] = finders
    try:
        import trio
    except Exception:  # a Trio whose import uses a placeholder: import it as usual
        failed = True
    else:
        failed = False
    finally:
        for finder in finders:
            sys.meta_path.remove(finder)
    if failed:
        for name in [n for n in sys.modules if n == "trio" or n.startswith("trio.")]:
            del sys.modules[name]
        _trio_thread_names.forget()
        import trio  # noqa: F401

        return False
    _trio_thread_names.settle()
    stand_ins: list[ModuleType] = [sys.modules[name] for name in LAZY if name in sys.modules]
    stand_in_ids = set(map(id, stand_ins))
    for module in stand_ins:
        del sys.modules[module.__name__]
    package = vars(sys.modules["trio"])
    left_out: dict[str, dict[str, tuple[str, str]]] = {"trio": {}}
    for name, module in list(sys.modules.items()):
        if name == "trio" or name.startswith("trio."):
            for key, value in list(vars(module).items()):
                if isinstance(value, Placeholder):
                    left_out.setdefault(name, {})[key] = (value.module, value.name)
                elif id(value) in stand_in_ids and name != "trio":  # a stand-in bound by name
                    left_out.setdefault(name, {})[key] = (value.__name__, "")
                else:
                    continue
                del vars(module)[key]
    for module in stand_ins:
        short = module.__name__.rpartition(".")[2]
        if package.get(short) is module:
            del package[short]
            left_out["trio"][short] = (module.__name__, "")
    for name in ALSO_BOUND:
        left_out["trio"][name.rpartition(".")[2]] = (name, "")
    _left_out.update(left_out)
    if not set(left_out) <= set(HOLDERS):
        _load_all()  # a placeholder where a module's own code would look it up
        return False
    for holder in left_out:
        namespace = vars(sys.modules[holder])
        _previous[holder] = namespace.get("__getattr__")
        namespace["__getattr__"] = _getattr_of(holder)
        namespace["__dir__"] = _dir_of(holder)
    return True


def _getattr_of(holder: str) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        left_out = _left_out.get(holder, {})
        if name == "__all__" and left_out:
            namespace = vars(sys.modules[holder])
            return [n for n in [*namespace, *left_out] if not n.startswith("_")]
        if name in left_out and _loading_thread != threading.get_ident():
            with _lock:
                if _left_out:  # not loaded by another thread meanwhile
                    _load_all()
            return getattr(sys.modules[holder], name)
        previous = _previous.get(holder)
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module {holder!r} has no attribute {name!r}")

    return __getattr__


def _dir_of(holder: str) -> Callable[[], list[str]]:
    def __dir__() -> list[str]:
        names = {*vars(sys.modules[holder]), *_left_out.get(holder, {})}
        # not this module's own names, gone once loaded
        own = {"__dir__"} if _previous.get(holder) is not None else {"__dir__", "__getattr__"}
        return sorted(names - own)

    return __dir__


def _load_all() -> None:
    """Import :data:`LAZY` for real, bind every left-out name, fix the
    public ones' metadata as Trio's import does, and put the holders' own
    ``__getattr__`` back."""
    global _loading_thread
    import importlib

    from trio._util import fixup_module_metadata

    with _lock:
        _loading_thread = threading.get_ident()
        try:
            modules = {name: importlib.import_module(name) for name in (*LAZY, *ALSO_BOUND)}
            for holder, names in _left_out.items():
                namespace = vars(sys.modules[holder])
                bound: dict[str, object] = {}
                for name, (source, attr) in names.items():
                    value = getattr(modules[source], attr) if attr else modules[source]
                    namespace[name] = bound[name] = value
                if holder in _previous:
                    previous = _previous.pop(holder)
                    namespace.pop("__dir__", None)
                    if previous is None:
                        namespace.pop("__getattr__", None)
                    else:
                        namespace["__getattr__"] = previous
                if holder in HOLDERS:
                    fixup_module_metadata(holder, bound)
            _left_out.clear()
        finally:
            _loading_thread = None
