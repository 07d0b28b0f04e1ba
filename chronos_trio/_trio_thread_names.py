"""The worker command's Trio without ``ctypes`` until its first thread.

At its import, Trio's thread cache (``trio._core._thread_cache``) looks up
``pthread_setname_np`` to give the OS threads it starts their Trio names:
it imports ``ctypes`` and ``ctypes.util`` (which import ``shutil`` and
``subprocess``) and calls ``ctypes.util.find_library("pthread")``, which
on Linux runs ``/sbin/ldconfig -p`` in a child process. A worker whose
handlers run on Trio's loop starts no thread before its first job: about
10M instructions and a fork and exec (about 2 ms) spent for nothing.

While :mod:`chronos_trio._lazy_trio` imports Trio (the worker command only),
``ctypes`` and ``ctypes.util`` are stand-ins (:func:`stand_in_finder`) whose
``find_library`` finds nothing and whose ``CDLL`` cannot load a library, so
the thread cache's look-up ends where it ends on a platform without the
function (``set_os_thread_name`` None). :func:`settle` then takes the
stand-ins out of ``sys.modules`` and sets ``set_os_thread_name`` to
:func:`name_thread`, which, the first time it is asked to name a started
thread, imports the real ``ctypes``, runs the thread cache's own look-up
and from then on is what the thread cache would have had. A thread is named
as before: Trio asks before a thread has started (no ident: the real
function does nothing then, nor does this one) and when a job with a name
runs in it.

A Trio whose thread cache does not look like that (the names
``get_os_thread_name_func``, ``set_os_thread_name``, ``ctypes``), or any
other module holding a stand-in, gets the real ``ctypes`` at once: each
stand-in replaced, the look-up run again.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

from ._stand_ins import StandInFinder, is_stand_in

#: The modules stood in for while Trio imports.
STANDS_IN_FOR = ("ctypes", "ctypes.util")
THREAD_CACHE = "trio._core._thread_cache"


def _find_no_library(name: str) -> None:
    return None


class _NoLibrary:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise OSError("ctypes is loaded at the first thread (chronos_trio._trio_thread_names)")


def _fill(module: ModuleType) -> None:
    if module.__name__ == "ctypes":
        module.__path__ = []
        module.CDLL = _NoLibrary  # type: ignore[attr-defined]
    else:
        module.find_library = _find_no_library  # type: ignore[attr-defined]


def stand_in_finder() -> StandInFinder:
    """Finds the stand-ins of :data:`STANDS_IN_FOR` (while Trio imports)."""
    return StandInFinder(STANDS_IN_FOR, _fill)


def forget() -> None:
    """Take the stand-ins out of ``sys.modules`` (Trio's import failed)."""
    for name in STANDS_IN_FOR:
        if is_stand_in(sys.modules.get(name)):
            del sys.modules[name]


def settle() -> bool:
    """After Trio's import: the stand-ins out, the thread cache's naming on
    first use (True); or, when anything else holds a stand-in or the thread
    cache is not as expected, the real ``ctypes`` everywhere and the look-up
    run again (False)."""
    forget()
    cache = sys.modules.get(THREAD_CACHE)
    holders = [
        (module, key)
        for name, module in list(sys.modules.items())
        if isinstance(module, ModuleType)
        for key, value in list(vars(module).items())
        if is_stand_in(value) and value.__name__ in STANDS_IN_FOR
    ]
    expected = (
        cache is not None
        and [(module, key) for module, key in holders] == [(cache, "ctypes")]
        and vars(cache).get("set_os_thread_name", False) is None
        and callable(vars(cache).get("get_os_thread_name_func"))
    )
    if expected:
        assert cache is not None
        cache.set_os_thread_name = name_thread  # type: ignore[attr-defined]
        return True
    if holders:
        import ctypes
        import ctypes.util

        real = {"ctypes": ctypes, "ctypes.util": ctypes.util}
        for module, key in holders:
            setattr(module, key, real[vars(module)[key].__name__])
        if cache is not None and callable(vars(cache).get("get_os_thread_name_func")):
            cache.set_os_thread_name = cache.get_os_thread_name_func()  # type: ignore[attr-defined]
    return False


def name_thread(ident: int | None, name: str) -> None:
    """The thread cache's ``set_os_thread_name`` until a started thread is
    named: then the real ``ctypes`` is imported, the thread cache's own
    look-up run and its result (None where the platform has no such
    function) put in this one's place and used."""
    if ident is None:  # not started: the real function does nothing either
        return
    import ctypes
    import ctypes.util

    cache = sys.modules[THREAD_CACHE]
    cache.ctypes = ctypes  # type: ignore[attr-defined]
    real: Callable[[int | None, str], None] | None = cache.get_os_thread_name_func()
    cache.set_os_thread_name = real  # type: ignore[attr-defined]
    if real is not None:
        real(ident, name)
