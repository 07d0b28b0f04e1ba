"""A worker's cache of the code attrs compiles for its classes.

attrs writes the methods of each class (``__init__``, and what a class does
not define itself) as Python source when the class is defined and
``compile()``s it: before a worker's first job that is the source of about
150 classes, Trio's and ours, and compiling it is the largest part of a
worker's start-up that is not an import. The source is the same from one
start to the next, so the worker command (``python -m chronos_trio worker``,
``chronos-trio worker``; nothing for any other importer or command) keeps
the code objects of those compiles in a file, as Python keeps a module's
bytecode in ``__pycache__``:

* one file per interpreter (its bytecode magic number and cache tag), its
  optimisation level and the compiler flags attrs and typing compile with, in
  ``$CHRONOS_CODE_CACHE`` or else ``$XDG_CACHE_HOME/chronos_trio`` (else
  ``~/.cache/chronos_trio``); ``CHRONOS_CODE_CACHE=off`` turns it off;
* keyed by the exact source text and file name attrs compiles, so a class
  changed in any way (a field, a default, an attrs release that writes
  other source) misses and is compiled as before;
* a generated ``__hash__`` holds a number that changes from process to
  process (:func:`type_hash_key`): the key masks it, and the cached code
  gets the number back (:func:`swap_constant`);
* read once, at the package's import, if the file is the user's own and
  nobody else may write it; each entry's code stays marshalled until a
  class asks for it; any damage (a short or garbled file or entry, another
  format) is a miss, never an error;
* written when the worker's app is imported (``cli``'s worker command,
  before its Trio run), when its first job's payload is decoded (before the
  handler runs: what the decoding compiled, cattrs' code for the payload's
  class, is kept by a worker that never exits gracefully too) and again at
  the process's exit, each time only if
  something missed since: the entries used by this process and those
  already in the file (but only this process's when that would pass
  :data:`MAX_BYTES`), to a new file renamed over the old one, so workers
  starting together each write a whole file and the last one stays. A
  directory that cannot be made or written leaves the cache unwritten,
  nothing else.

At the worker command's start attrs is not imported yet: ``attr._make``
is then loaded with the hook already set as its global ``compile``, so the
classes attrs defines for itself at its own import (its validators,
converters, ``Attribute``) are cached too.

What a class does is unchanged: the code object is the one ``compile()``
returns for that source (``marshal`` keeps it whole, as it does a module's
bytecode), evaluated by attrs as before. It hooks only the name
``compile`` in ``attr._make``, where attrs' ``_compile_and_eval`` looks it
up; an attrs that no longer compiles there is left alone (no cache).

``typing.ForwardRef`` compiles each string annotation it is made for (a
``TypedDict``'s or ``NamedTuple``'s fields in a module with ``from
__future__ import annotations``, a handler's signature read by
``get_type_hints``): about 70 before a worker's first job (about 3M
instructions in all). The name ``compile`` in ``typing`` is hooked the same
way (when ``ForwardRef.__init__`` compiles through it), into the same
file, keyed by the exact source.
"""

from __future__ import annotations
import __future__

import atexit
import builtins
import functools
import marshal
import operator
import os
import sys
from collections.abc import Callable
from importlib.machinery import PathFinder, SourceFileLoader
from types import CodeType, ModuleType
from typing import Any

#: The environment variable naming the cache's directory (``off``: none).
ENV = "CHRONOS_CODE_CACHE"

#: A cache file's first bytes; another format is a miss.
HEADER = b"chronos_trio attrs code 2\n"

#: A cache file larger than this keeps only the entries of the process
#: that writes it (a worker's start-up needs about 300 kB).
MAX_BYTES = 8 << 20

_compile = builtins.compile

# The state of the one installed cache (None: not installed).
_path: str | None = None
_flags = 0  # the __future__ flags of attr._make
_typing_flags = 0  # ... of typing
#: An entry: the code compiled, marshalled (unmarshalled only when a class
#: asks for it), and the type hash written in its source (None: the source
#: has none, or the key is the exact source).
Entry = tuple[bytes, "int | None"]
_stored: dict[str, Entry] = {}  # read from the file
_used: dict[str, Entry] = {}  # asked for by this process, hit or miss
_missed = 0
_saved_after_first_job = False  # save_after_first_payload() has run


def cache_dir() -> str | None:
    """The cache's directory, or None when turned off."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "off", "0", "no") else chosen
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "chronos_trio")


#: Every ``__future__`` compiler flag (what a ``compile()`` call inherits).
_FUTURE_MASK = functools.reduce(
    operator.or_, (getattr(__future__, name).compiler_flag for name in __future__.all_feature_names)
)


def future_flags(func: Any) -> int:
    """The ``__future__`` compiler flags of ``func``'s code: what a
    ``compile()`` called from it inherits."""
    flags: int = func.__code__.co_flags & _FUTURE_MASK
    return flags


def _hooks(module: ModuleType, func: object) -> bool:
    """Whether ``func`` of ``module`` compiles through the module's global
    name ``compile`` and nothing else has taken that name."""
    code = getattr(func, "__code__", None)
    return (
        isinstance(code, CodeType) and "compile" in code.co_names and "compile" not in vars(module)
    )


def file_name(flags: int, typing_flags: int) -> str:
    from importlib._bootstrap_external import MAGIC_NUMBER

    tag = sys.implementation.cache_tag or sys.implementation.name
    level = sys.flags.optimize
    return f"attrs-{tag}-{MAGIC_NUMBER.hex()}-O{level}-f{flags:x}-{typing_flags:x}.marshal"


def read(path: str) -> dict[str, Entry]:
    """The entries of the cache file at ``path``: empty when it is missing,
    damaged, in another format, not the user's own or writable by others."""
    try:
        with open(path, "rb") as file:
            st = os.fstat(file.fileno())
            if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
                return {}
            data = file.read()
        if not data.startswith(HEADER):
            return {}
        entries = marshal.loads(memoryview(data)[len(HEADER) :])
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if type(entries) is not dict:
        return {}
    return {key: entry for key, entry in entries.items() if _is_entry(key, entry)}


def _is_entry(key: object, entry: object) -> bool:
    return (
        type(key) is str
        and type(entry) is tuple
        and len(entry) == 2
        and type(entry[0]) is bytes
        and (entry[1] is None or type(entry[1]) is int)
    )


def write(path: str, data: bytes) -> bool:
    """Write ``data`` (marshalled entries) to ``path`` whole, behind the
    header (a new file renamed over it); False when the directory cannot be
    made or written."""
    directory = os.path.dirname(path)
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(HEADER)
                file.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return False
    return True


#: The file names attrs compiles a class's methods under, and the one whose
#: ``hash()`` it writes into a generated ``__hash__`` (the type hash).
_METHODS_PREFIXES = ("<attrs generated methods ", "<attrs generated __hash__ ")
_HASH_PREFIX = "<attrs generated hash "


def type_hash_key(source: str, filename: str) -> tuple[str, int] | None:
    """The key of a source holding attrs' type hash, and that hash.

    A generated ``__hash__`` hashes ``hash("<attrs generated hash
    MODULE.CLASS>")``, an integer written into the source, which differs
    from process to process (string hashes are randomised). The key writes
    it as as many ``#`` as it has characters, so two sources that differ in
    that number only, and in no character's position, share a key; the
    number is put back into the code object (:func:`swap_constant`).
    None when the source holds no such number exactly once."""
    for prefix in _METHODS_PREFIXES:
        if filename.startswith(prefix):
            number = str(hash(_HASH_PREFIX + filename[len(prefix) :]))
            break
    else:
        return None
    at = source.find(number)
    if (
        at < 1
        or source.find(number, at + 1) != -1
        or source[at - 1] != " "
        or source[at + len(number) : at + len(number) + 1] != ","
    ):
        return None
    masked = f"{source[:at]}{'#' * len(number)}{source[at + len(number) :]}"
    return f"{filename}\0{masked}", int(number)


def _count(value: object, number: int) -> int:
    if type(value) is int:
        return 1 if value == number else 0
    if type(value) is tuple:
        return sum(_count(item, number) for item in value)
    if type(value) is CodeType:
        return _count(value.co_consts, number)
    return 0


def _swap(value: Any, old: int, new: int) -> Any:
    if type(value) is int:
        return new if value == old else value
    if type(value) is tuple:
        return tuple(_swap(item, old, new) for item in value)
    if type(value) is CodeType and _count(value.co_consts, old):
        return value.replace(co_consts=_swap(value.co_consts, old, new))
    return value


def swap_constant(code: CodeType, old: int, new: int) -> CodeType | None:
    """``code`` with the integer constant ``old`` (there exactly once, in
    it or the code it holds) made ``new``: what compiling the source with
    ``new`` written for ``old`` gives, as both are written in as many
    characters. None when ``old`` is not there exactly once or ``new`` is
    there already (a compile would share the constant)."""
    if old == new:
        return code
    if _count(code, old) != 1 or _count(code, new):
        return None
    swapped: CodeType = _swap(code, old, new)
    return swapped


def _hook(kind: str) -> Callable[..., Any]:
    """The ``compile()`` a hooked module sees: its plain call (``kind``
    ``exec``: attrs' ``_compile_and_eval``, keyed by file name and source
    with the type hash masked; ``eval``: ``typing.ForwardRef``, keyed by the
    source) from the cache when the same was compiled before; any other
    call to ``compile()`` unchanged, with the caller's ``__future__`` flags."""

    def hooked(
        source: Any,
        filename: Any,
        mode: str,
        flags: int = 0,
        dont_inherit: bool = False,
        optimize: int = -1,
    ) -> Any:
        inherited = _flags if kind == "exec" else _typing_flags  # what the caller's call inherits
        if (
            mode != kind
            or flags
            or dont_inherit
            or optimize != -1
            or type(source) is not str
            or type(filename) is not str
        ):
            return _compile(
                source, filename, mode, flags | (0 if dont_inherit else inherited), True, optimize
            )
        keyed = type_hash_key(source, filename) if kind == "exec" else None
        key, number = keyed if keyed is not None else (f"{kind}\0{filename}\0{source}", None)
        return _cached(key, number, source, filename, kind, inherited)

    return hooked


#: ``compile`` in ``attr._make``.
cached_compile = _hook("exec")
#: ``compile`` in ``typing`` (each string annotation a ``ForwardRef`` is made
#: for: a ``TypedDict``'s, a ``NamedTuple``'s, ``get_type_hints``'; about 70
#: before a worker's first job).
cached_eval_compile = _hook("eval")


def _cached(
    key: str, number: int | None, source: str, filename: str, mode: str, flags: int
) -> CodeType:
    global _missed
    code: CodeType | None = None
    entry = _used.get(key) or _stored.get(key)
    if entry is not None:
        code = _unmarshal(entry[0])
        if code is not None and number is not None:
            code = None if entry[1] is None else swap_constant(code, entry[1], number)
    if entry is not None and code is not None:
        _used[key] = entry
        return code
    code = _compile(source, filename, mode, flags, True)
    _missed += 1
    _used[key] = (marshal.dumps(code), number)
    return code


def _unmarshal(data: bytes) -> CodeType | None:
    try:
        code = marshal.loads(data)
    except (ValueError, EOFError, TypeError):
        return None
    return code if type(code) is CodeType else None


def install() -> bool:
    """Read the cache and hook attrs' compile (and ``typing.ForwardRef``'s,
    when it compiles where it is hooked); False (nothing done) when the
    cache is off or attrs does not compile where it is hooked.

    When attrs is not imported yet (the worker command: this runs at the
    package's import), its ``attr._make`` is loaded with the name
    ``compile`` already set in its namespace (:class:`_AttrsMakeFinder`), so
    the classes attrs defines for itself at its own import (its validators,
    converters, ``Attribute``: about 20M instructions of compiling) come
    from the cache too."""
    global _typing_flags
    if _path is not None:
        return True
    directory = cache_dir()
    if directory is None:
        return False
    import typing

    typing_caller = getattr(typing.ForwardRef, "__init__", None)
    hook_typing = _hooks(typing, typing_caller)
    _typing_flags = future_flags(typing_caller) if hook_typing else 0
    finder = None
    if "attr._make" not in sys.modules:
        finder = _AttrsMakeFinder(directory)
        sys.meta_path.insert(0, finder)
    try:
        import attr._make as make
    finally:
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
    attrs_caller = getattr(make, "_compile_and_eval", None)
    preset = vars(make).get("compile") is cached_compile
    if preset:
        del make.compile  # type: ignore[attr-defined]  # set again below, once checked
    if not _hooks(make, attrs_caller):
        _forget()
        return False
    if not preset:
        _open(directory, future_flags(attrs_caller))
    make.compile = cached_compile  # type: ignore[attr-defined]
    if hook_typing:
        typing.compile = cached_eval_compile  # type: ignore[attr-defined]
    # What is compiled after the app's import (classes loaded on first use)
    # is kept for the next start when the worker exits.
    atexit.register(save)
    return True


def _open(directory: str, flags: int) -> None:
    """Name the cache file for attrs' ``__future__`` flags and read it."""
    global _path, _flags, _stored
    _flags = flags
    _path = os.path.join(directory, file_name(_flags, _typing_flags))
    _stored = read(_path)


def _forget() -> None:
    global _path, _stored, _missed, _saved_after_first_job
    _path, _saved_after_first_job = None, False
    _stored, _missed = {}, 0
    _used.clear()


class _AttrsMakeFinder:
    """Finds ``attr._make`` as the import system would, and loads it with
    :data:`cached_compile` set as its global ``compile`` before its code
    runs (where attrs' ``_compile_and_eval`` looks the name up); the cache
    file is read then, once the flags of attrs' code are known. Only for a
    plain source file loader (anything else is loaded as found, and the
    hook is set after the import); removed from ``sys.meta_path`` at its
    first use."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "attr._make":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is not None and type(spec.loader) is SourceFileLoader:
            spec.loader = _AttrsMakeLoader(spec.loader.name, spec.loader.path, self.directory)
        return spec


class _AttrsMakeLoader(SourceFileLoader):
    """``attr._make``'s source loader: its code runs with ``compile`` set in
    its namespace (see :class:`_AttrsMakeFinder`), the cache file read in
    ``directory`` first."""

    def __init__(self, fullname: str, path: str, directory: str) -> None:
        super().__init__(fullname, path)
        self.directory = directory

    def exec_module(self, module: ModuleType) -> None:
        code = self.get_code(module.__name__)
        if code is None:  # pragma: no cover - a source file loader always has code
            raise ImportError(f"no code for {module.__name__!r}", name=module.__name__)
        _open(self.directory, code.co_flags & _FUTURE_MASK)
        module.compile = cached_compile  # type: ignore[attr-defined]
        exec(code, vars(module))


def uninstall() -> None:
    """Take the hook away and forget the cache (for tests)."""
    import typing

    import attr._make as make

    atexit.unregister(save)
    if vars(make).get("compile") is cached_compile:
        del make.compile  # type: ignore[attr-defined]
    if vars(typing).get("compile") is cached_eval_compile:
        del typing.compile  # type: ignore[attr-defined]
    _forget()


def save() -> None:
    """Write the cache file if a compile missed since it was read. Never
    raises."""
    global _stored, _missed
    if _path is None or not _missed:
        return
    entries = {**_stored, **_used}
    data = marshal.dumps(entries)
    if len(data) > MAX_BYTES:
        entries = dict(_used)
        data = marshal.dumps(entries)
    if write(_path, data):
        _stored, _missed = entries, 0


def save_after_first_payload() -> None:
    """:func:`save` once per process, when the first job's payload is
    decoded (the worker's executor calls it for each job; only the first
    call does anything): what its decoding compiled (cattrs' code for the
    payload's class, its classes) is then kept for the next start, also when
    this process never exits gracefully. Writes only when a compile missed
    since the last save (a start whose classes all came from the file
    writes nothing); never raises."""
    global _saved_after_first_job
    if not _saved_after_first_job:
        _saved_after_first_job = True
        save()


def launched_as_worker() -> bool:
    """Whether the command line's command is ``worker`` (its first word, as
    ``cli.parse_args`` tells it)."""
    from ._collector import launched_as_command_line

    return launched_as_command_line() and sys.argv[1:2] == ["worker"]


if launched_as_worker():
    install()
