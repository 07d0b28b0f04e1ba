"""The worker's cache of the code attrs compiles (``chronos_trio._code_cache``):
the classes behave the same with and without it, a damaged or foreign file
is a miss, an unwritable directory is no error, and only the worker command
installs it."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from chronos_trio import _code_cache

ROOT = Path(__file__).resolve().parent.parent

#: Classes of every shape attrs generates code for; prints what each does.
CLASSES = r"""
import json, sys, typing
import attrs
from chronos_trio import _code_cache

if sys.argv[1] == "on":
    assert _code_cache.install()

@attrs.frozen
class Point:
    x: int
    y: int = attrs.field(default=0, converter=int)

@attrs.define
class Box:
    items: list = attrs.Factory(list)
    name: str = attrs.field(default="b", validator=attrs.validators.instance_of(str))

@attrs.frozen(cache_hash=True)
class Cached:
    a: str
    b: tuple = ()

@attrs.define(order=True, kw_only=True)
class Ordered:
    k: int
    v: float = attrs.field(eq=False)

@attrs.frozen
class Empty:
    pass

@attrs.define(slots=False, hash=True)
class Loose:
    z: int = attrs.field(eq=str.lower)
    w: int = attrs.field(default=0, eq=False)

class TD(typing.TypedDict, total=False):
    a: "int"
    b: "list[str] | None"

class NT(typing.NamedTuple):
    x: "float"
    p: "Point | None" = None

def annotated(a: "dict[str, int]", b: "Box") -> "Point | None": ...

def attempt(f):
    try:
        return repr(f())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

out = {
    "point": [repr(Point(1, "2")), hash(Point(1, 2)), Point(1) == Point(1, 0),
              attempt(lambda: Point()), attempt(lambda: setattr(Point(1), "x", 2))],
    "box": [repr(Box()), Box([1]) == Box([1]), attempt(lambda: Box(name=3)),
            attempt(lambda: hash(Box()))],
    "cached": [hash(Cached("a")), hash(Cached("a", (1,))), repr(Cached("q"))],
    "ordered": [Ordered(k=1, v=2.0) < Ordered(k=2, v=0.0),
                Ordered(k=1, v=1.0) == Ordered(k=1, v=9.0), attempt(lambda: Ordered(1, 2.0))],
    "empty": [repr(Empty()), hash(Empty()), Empty() == Empty()],
    "loose": [hash(Loose("A")), Loose("A") == Loose("a", 2), repr(Loose("b"))],
    "typing": [repr(typing.get_type_hints(TD)), repr(typing.get_type_hints(NT)),
               repr(typing.get_type_hints(annotated)), repr(NT(1.0)),
               typing.ForwardRef("Point | None").__forward_code__
               == compile("Point | None", "<string>", "eval"),
               attempt(lambda: typing.ForwardRef("1 +"))],
    "missed": _code_cache._missed,
}
_code_cache.save()
print(json.dumps(out))
"""


def run_classes(cache: Path | None, seed: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": str(seed)}
    env[_code_cache.ENV] = str(cache) if cache is not None else "off"
    proc = subprocess.run(
        [sys.executable, "-c", CLASSES, "on" if cache is not None else "off"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def cache_file(directory: Path) -> Path:
    (path,) = directory.iterdir()
    return path


def test_classes_behave_the_same_with_the_cache_cold_and_warm(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    without = run_classes(None, seed=1)
    cold = run_classes(cache, seed=1)
    assert cold.pop("missed") > 0 and without.pop("missed") == 0
    assert cold == without
    assert cache_file(cache).stat().st_mode & 0o777 == 0o600
    warm = run_classes(cache, seed=1)
    assert warm.pop("missed") == 0  # every class from the file
    assert warm == without
    # Another hash seed: each generated __hash__ holds another type hash.
    # The classes whose type hash is written in as many characters are
    # hits (their constant swapped), and hash like compiled ones.
    misses = []
    for seed in (2, 3, 4, 5):
        other_without = run_classes(None, seed=seed)
        other_without.pop("missed")
        other = run_classes(cache, seed=seed)
        misses.append(other.pop("missed"))
        assert other == other_without
    # Without the swap each of these seeds would compile the four classes
    # with a generated __hash__ again (the seeds are fixed: so are hashes).
    assert 0 in misses and max(misses) < 4


def test_a_damaged_or_foreign_file_is_a_miss(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    expected = run_classes(None, seed=7)
    expected.pop("missed")
    run_classes(cache, seed=7)
    path = cache_file(cache)
    whole = path.read_bytes()
    entries = _code_cache.read(str(path))
    assert entries
    garbled = {key: (b"\xe3garbled" + data[:9], n) for key, (data, n) in entries.items()}
    not_code = {key: (marshal.dumps(("a tuple",)), n) for key, (data, n) in entries.items()}
    damaged = (
        _code_cache.HEADER + marshal.dumps(garbled),  # each entry's code unreadable
        _code_cache.HEADER + marshal.dumps(not_code),
        whole[: len(whole) // 2],  # cut short
        whole[: len(_code_cache.HEADER)] + b"\x00garbage" * 50,
        b"another format\n" + whole[len(_code_cache.HEADER) :],
        _code_cache.HEADER + marshal.dumps(["a list"]),
        _code_cache.HEADER + marshal.dumps({"key": ("not code", None)}),
        b"",
    )
    for data in damaged:
        path.write_bytes(data)
        got = run_classes(cache, seed=7)
        assert got.pop("missed") > 0
        assert got == expected
        assert _code_cache.read(str(path))  # written whole again
    path.chmod(0o622)  # writable by others: not read
    assert _code_cache.read(str(path)) == {}


def test_a_directory_that_cannot_be_written_is_no_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    expected = run_classes(None, seed=3)
    got = run_classes(blocker / "cache", seed=3)
    assert got.pop("missed") > 0 and expected.pop("missed") == 0
    assert got == expected
    assert not _code_cache.write(str(blocker / "cache" / "x"), b"")


def test_the_swapped_constant_is_what_compile_gives() -> None:
    @attrs.frozen
    class Probe:
        a: int
        b: str = "x"

    @attrs.frozen
    class Bare:
        pass

    import attr._make as make

    for cls in (Probe, Bare):
        script, _ = make._make_hash_script(
            cls, list(attrs.fields(cls)), frozen=True, cache_hash=False
        )
        filename = make._generate_unique_filename(cls, "methods")
        keyed = _code_cache.type_hash_key(script, filename)
        assert keyed is not None
        _key, number = keyed
        assert number == hash(make._generate_unique_filename(cls, "hash"))
        digits = str(abs(number))
        other = int(digits[:-1] + str((int(digits[-1]) + 1) % 10)) * (1 if number > 0 else -1)
        other_script = script.replace(str(number), str(other))
        assert _code_cache.type_hash_key(other_script, filename) is None  # not its hash
        code = compile(script, filename, "exec")
        swapped = _code_cache.swap_constant(code, number, other)
        assert swapped is not None
        # Code objects compare their bytecode, constants, names, line and
        # position tables, nested code included.
        assert swapped == compile(other_script, filename, "exec")
        assert swapped != code
        assert _code_cache.swap_constant(code, 12345, other) is None  # not there


def test_only_the_worker_command_installs_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), _code_cache.ENV: str(tmp_path)}
    probe = "import sys, chronos_trio; print(chronos_trio._code_cache._path is not None)"
    plain = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert plain.stdout.strip() == "False"
    for argv, expected in (
        (["worker", "app:app"], True),
        (["--help"], False),
        (["enqueue", "worker"], False),
        (["stats"], False),
    ):
        code = (
            f"import sys; sys.orig_argv = [sys.executable, '-m', 'chronos_trio', *{argv!r}]; "
            f"sys.argv = ['-m', *{argv!r}]; import chronos_trio; "
            "print(chronos_trio._code_cache._path is not None)"
        )
        got = subprocess.run(
            [sys.executable, "-c", code],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert got.stdout.strip() == str(expected), argv


@pytest.mark.parametrize("value", ["off", "", "0"])
def test_turned_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(_code_cache.ENV, value)
    assert _code_cache.cache_dir() is None
    assert not _code_cache.install()


def test_default_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(_code_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _code_cache.cache_dir() == str(tmp_path / "chronos_trio")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert _code_cache.cache_dir() == os.path.expanduser("~/.cache/chronos_trio")


def test_workers_starting_together_leave_a_whole_file(tmp_path: Path) -> None:
    """Four cold starts at once, each writing: the file left is one of
    theirs, whole, and a start after them compiles nothing."""
    cache = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "5"}
    env[_code_cache.ENV] = str(cache)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CLASSES, "on"], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    outs = [json.loads(proc.communicate(timeout=60)[0]) for proc in procs]
    for out in outs:  # how many missed depends on who wrote first
        out.pop("missed")
    assert all(out == outs[0] for out in outs)
    assert [p.name for p in cache.iterdir()] == [cache_file(cache).name]  # no temporary left
    assert _code_cache.read(str(cache_file(cache)))
    assert run_classes(cache, seed=5)["missed"] == 0


def test_the_hooks_compile_with_their_callers_future_flags(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """attrs' ``_make`` has ``from __future__ import annotations``, so its own
    ``compile()`` makes annotations strings; the hook, called from there,
    compiles as it would have (``typing`` has no such import)."""
    import typing

    import attr._make as make

    monkeypatch.setenv(_code_cache.ENV, str(tmp_path))
    assert _code_cache.install()
    try:
        source = "def f(x: not_defined) -> None: pass"
        for _ in range(2):  # a miss, then a hit
            namespace: dict[str, object] = {}
            exec(make.compile(source, "<attrs generated methods t.T>", "exec"), namespace)
            assert namespace["f"].__annotations__ == {"x": "not_defined", "return": "None"}  # type: ignore[attr-defined]
        assert _code_cache._missed == 1
        ref = typing.ForwardRef("list[int]")
        assert ref.__forward_code__ == compile("list[int]", "<string>", "eval", dont_inherit=True)
    finally:
        _code_cache.uninstall()
    assert "compile" not in vars(make) and "compile" not in vars(typing)


#: The worker command's start as far as the package's import, reporting what
#: the cache holds of attrs' own classes (its validators, ``Attribute``...).
ATTRS_OWN = r"""
import inspect, json, sys
sys.orig_argv = [sys.executable, "-m", "chronos_trio", "worker", "app:app"]
sys.argv = ["-m", "worker", "app:app"]
assert "attr" not in sys.modules
import chronos_trio
from chronos_trio import _code_cache
import attr, attr._make as make

own = [key for key in _code_cache._used if key.split("\0")[0].split(" ")[-1].startswith("attr.")]
print(json.dumps({
    "own": len(own),
    "missed": _code_cache._missed,
    "hooked": vars(make).get("compile") is _code_cache.cached_compile,
    "origin": make.__spec__.origin == make.__file__,
    "source": "def _compile_and_eval" in inspect.getsource(make),
    "finder_left": any(type(f).__name__ == "_AttrsMakeFinder" for f in sys.meta_path),
    "validator": repr(attr.validators.instance_of(int)),
}))
"""


def test_attrs_own_classes_come_from_the_cache_at_the_workers_second_start(
    tmp_path: Path,
) -> None:
    """The worker command loads ``attr._make`` with the hook already in its
    namespace: the classes attrs defines for itself at its import are
    compiled once, then taken from the file; the module is otherwise the
    one the import system finds (its file, its source)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "3"}
    env[_code_cache.ENV] = str(tmp_path)

    def start() -> dict[str, object]:
        proc = subprocess.run(
            [sys.executable, "-c", ATTRS_OWN],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        report: dict[str, object] = json.loads(proc.stdout)
        return report

    first = start()
    assert isinstance(first["own"], int) and first["own"] > 10
    assert first["hooked"] and first["origin"] and first["source"]
    assert not first["finder_left"]
    assert first["validator"] == "<instance_of validator for type <class 'int'>>"
    assert first["missed"] >= first["own"]  # type: ignore[operator]
    second = start()  # the file was written at the first one's exit
    assert second["own"] == first["own"]
    assert second["missed"] == 0
