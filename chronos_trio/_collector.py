"""The cyclic garbage collector while the command line starts.

Start-up makes tens of thousands of objects that live as long as the
process (modules, classes, functions, the app's tasks) and hardly any
cyclic garbage. The collector, run dozens of times meanwhile, would walk
them again and again. So the command line (``python -m chronos_trio``,
``chronos-trio``) holds automatic collection off from the package's first
import (the root ``__init__`` imports this module first; its import holds
only when :func:`launched_as_command_line`) until the command runs: a
worker once its app is imported, just before its Trio run (so whatever the
app's lifespan and its jobs make is collected as usual), any other command
once its arguments are parsed (``cli.main``). :func:`release` then freezes
what the imports made (no later collection walks it; what little of it is
garbage, the imports' own, is never freed, as before the hold) and gives
automatic collection back.

Collection is held off by raising the first generation's threshold, not by
``gc.disable()``, so that what the APP does to the collector while it is
imported is kept: an app that calls ``gc.disable()`` stays without
automatic collection, and one that sets its own thresholds keeps them.
"""

from __future__ import annotations

import gc
import os
import sys

#: The first generation's threshold while held: more allocations than a
#: start-up makes, so no automatic collection runs.
HELD_THRESHOLD = 1 << 30

_saved: tuple[int, ...] | None = None


def hold() -> None:
    """Hold automatic collection off until :func:`release`. Never raises;
    a second call while held does nothing."""
    global _saved
    if _saved is None:
        threshold = gc.get_threshold()
        if threshold[0] != HELD_THRESHOLD:
            _saved = threshold
            gc.set_threshold(HELD_THRESHOLD, *threshold[1:])


def launched_as_command_line() -> bool:
    """Whether this process was started as the command line:
    ``python [options] -m chronos_trio ...`` or the ``chronos-trio`` script."""
    argv: list[str] = list(sys.orig_argv)
    i = 1
    while i < len(argv) - 1:
        arg = argv[i]
        if arg == "-m":
            return argv[i + 1] == "chronos_trio"
        if not arg.startswith("-") or arg in ("-", "-c", "--"):
            break  # a script, -c or stdin: not the command line
        i += 2 if arg in ("-X", "-W") else 1  # the options that take a value
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "chronos-trio"


def release() -> None:
    """End :func:`hold`: freeze the objects made so far and put the
    thresholds back as they were, unless they were changed meanwhile (then
    they are left as set). ``gc.isenabled()`` is never touched. Never
    raises; does nothing when not held."""
    global _saved
    saved, _saved = _saved, None
    if saved is None:
        return
    gc.freeze()
    if gc.get_threshold()[0] == HELD_THRESHOLD:
        gc.set_threshold(*saved)


if launched_as_command_line():
    hold()
