"""The composition of the Redis store's Lua scripts (store/redis/_compose.py,
lua/README.md): the rules of ``--@include``, and that every shipped script
carries exactly the pieces it uses.

The second part reads Lua as text: comments and string literals are blanked
out, then a definition is a top-level ``local function name`` or ``local
name, ... =`` at the start of a line (pieces define everything at column 0),
and a use is any other occurrence of the name not after ``.`` or ``:`` (a
field, a method). Simple, and it errs towards seeing a use.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from importlib import resources

import pytest
import redis

from chronos_trio.store.redis import _check, _scripts
from chronos_trio.store.redis._compose import CompositionError, compose, includes, resolve

LUA = resources.files("chronos_trio.store.redis").joinpath("lua")
SCRIPTS = sorted(p.name[:-4] for p in LUA.iterdir() if p.name.endswith(".lua"))
PIECES = sorted(p.name[:-4] for p in LUA.joinpath("lib").iterdir() if p.name.endswith(".lua"))


def pieces_of(table: dict[str, str]) -> Callable[[str], bytes | None]:
    def piece(name: str) -> bytes | None:
        text = table.get(name)
        return None if text is None else text.encode()

    return piece


# -- the rules of composition ---------------------------------------------


def test_pieces_come_before_what_names_them_each_once() -> None:
    table = {
        "a": "--@include b\n--@include c\nlocal A = 1\n",
        "b": "--@include c\nlocal B = 2\n",
        "c": "local C = 3\n",
        "d": "local D = 4\n",
    }
    script = "--@include a\n--@include d\n--@include c\nreturn A\n"
    source = compose("s", script.encode(), pieces_of(table)).decode()
    assert source == "local C = 3\nlocal B = 2\nlocal A = 1\nlocal D = 4\nreturn A\n"
    order, own = resolve("s", script.encode(), pieces_of(table))
    assert [name for name, _ in order] == ["c", "b", "a", "d"]
    assert own == b"return A\n"


def test_directive_lines_are_dropped_everything_else_kept() -> None:
    table = {"p": "-- a comment\n--@include q\nlocal P = 1"}  # no final newline
    table["q"] = "local Q = 2\n"
    script = "-- header\n--@include p\n-- not a directive: --@include x\nreturn P\n"
    source = compose("s", script.encode(), pieces_of(table)).decode()
    assert source == (
        "local Q = 2\n-- a comment\nlocal P = 1\n"
        "-- header\n-- not a directive: --@include x\nreturn P\n"
    )


def test_no_directive_no_piece() -> None:
    assert compose("s", b"return 1\n", pieces_of({})) == b"return 1\n"


def test_an_unknown_piece_is_refused_naming_script_and_piece() -> None:
    table = {"a": "--@include nope\nlocal A = 1\n"}
    with pytest.raises(CompositionError, match=r"'lease'.*unknown piece 'nope' \(named by 'a'\)"):
        compose("lease", b"--@include a\n", pieces_of(table))
    named_by_script = r"'lease'.*unknown piece 'gone' \(named by 'lease'\)"
    with pytest.raises(CompositionError, match=named_by_script):
        compose("lease", b"--@include gone\n", pieces_of(table))


def test_a_cycle_is_refused_and_spelled_out() -> None:
    table = {
        "a": "--@include b\n",
        "b": "--@include c\n",
        "c": "--@include a\n",
    }
    with pytest.raises(CompositionError, match=r"'settle'.*include each other: a -> b -> c -> a"):
        compose("settle", b"--@include a\n", pieces_of(table))
    with pytest.raises(CompositionError, match=r"include each other: self -> self"):
        compose("s", b"--@include self\n", pieces_of({"self": "--@include self\n"}))


def test_a_malformed_directive_is_refused() -> None:
    for line in ("--@include", "--@include a b", "--@includes a", "--@use a", '--@include "a"'):
        with pytest.raises(CompositionError, match="malformed directive"):
            includes(f"{line}\nreturn 1\n".encode(), where="s")


def test_a_piece_reached_twice_is_not_a_cycle() -> None:
    table = {"a": "--@include c\n", "b": "--@include c\n", "c": "local C = 1\n"}
    source = compose("s", b"--@include a\n--@include b\nreturn C\n", pieces_of(table))
    assert source.count(b"local C = 1") == 1


# -- every shipped script carries exactly what it uses ---------------------

_NOISE = re.compile(
    r"""--\[(=*)\[.*?\]\1\]|--[^\n]*|\[(=*)\[.*?\]\2\]|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*\"""",
    re.S,
)
_DEF_FUNCTION = re.compile(r"^local function ([A-Za-z_]\w*)", re.M)
_DEF_VALUES = re.compile(r"^local ([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=", re.M)
_NAME = re.compile(r"(?<![\w.:])([A-Za-z_]\w*)")


def code(text: str) -> str:
    """Lua text without comments; string literals left empty."""
    return _NOISE.sub(lambda m: "''" if m.group(0)[0] in "'\"[" else "", text)


def defined(text: str) -> set[str]:
    """The names a Lua text defines at its top level."""
    body = code(text)
    names = set(_DEF_FUNCTION.findall(body))
    for group in _DEF_VALUES.findall(body):
        names.update(n.strip() for n in group.split(","))
    return names


def used(text: str) -> Counter[str]:
    """How often each name occurs in a Lua text (definitions included)."""
    return Counter(_NAME.findall(code(text)))


def piece_text(name: str) -> str:
    raw = _scripts.piece(name)
    assert raw is not None, name
    return raw.decode()


def script_text(name: str) -> str:
    return LUA.joinpath(f"{name}.lua").read_text()


#: Which piece defines each name (every piece, made in Python or a file).
OWNER: dict[str, str] = {}
for _name in [*_scripts.GENERATED, *PIECES]:
    for _defined in defined(piece_text(_name)):
        assert _defined not in OWNER, f"{_defined} is defined by {OWNER[_defined]} and {_name}"
        OWNER[_defined] = _name


def test_the_analysis_sees_definitions_and_uses() -> None:
    text = (
        "local function f(x) return g(x.h) end\nlocal A, B = 1, 'f'\n"
        '-- f("g")\nlocal s = "-- not a comment" .. h\n  local function inner() end\n'
    )
    assert defined(text) == {"f", "A", "B", "s"}
    counts = used(text)
    assert counts["f"] == 1 and counts["g"] == 1 and counts["h"] == 1 and counts["x"] == 2


def test_the_shipped_pieces_and_scripts_are_what_the_tests_see() -> None:
    assert "lease" in SCRIPTS and "settle" in SCRIPTS and len(SCRIPTS) >= 29
    assert "dead_letter" in PIECES and len(PIECES) >= 30
    loaded = {
        s.name
        for s in [*vars(_scripts).values(), _check.INSPECT, _check.REPAIR]
        if isinstance(s, _scripts.Script)
    }
    assert loaded == set(SCRIPTS)


@pytest.mark.parametrize("name", [*SCRIPTS, *(f"lib/{p}" for p in PIECES)])
def test_each_file_names_the_pieces_whose_names_it_uses(name: str) -> None:
    """A script or piece names, itself, every piece whose names it uses
    (not through another piece: that one may stop naming it), and names no
    piece it does not use."""
    own_name = name.removeprefix("lib/")
    text = piece_text(own_name) if name.startswith("lib/") else script_text(name)
    named, _ = includes(text.encode(), where=name)
    own = defined(text)
    needed = {OWNER[n] for n in used(text) if n in OWNER and n not in own}
    needed.discard(own_name)
    assert sorted(set(named)) == sorted(needed), f"{name}: names {named}, uses {sorted(needed)}"
    assert len(named) == len(set(named)), f"{name} names a piece twice"


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_uses_everything_its_pieces_define(name: str) -> None:
    """No dead piece: each function or value an included piece defines
    occurs in the composed script somewhere besides its definition, and a
    name a script uses from a piece comes from one it includes."""
    order, own = resolve(name, script_text(name).encode(), _scripts.piece)
    source = b"".join(body for _, body in order).decode() + own.decode()
    counts = used(source)
    for piece, body in order:
        for defined_name in defined(body.decode()):
            assert counts[defined_name] > 1, f"{name}: {defined_name} (piece {piece}) is never used"
    included = {piece for piece, _ in order}
    for n in used(own.decode()):
        if n in OWNER and n not in defined(own.decode()):
            assert OWNER[n] in included, f"{name} uses {n} of piece {OWNER[n]} without it"


def test_every_script_is_sent_composed_and_redis_compiles_it(redis_url: str) -> None:
    """Each Script's source is its composition, and SCRIPT LOAD (which
    compiles it) accepts every one: a name left undefined would only fail
    when that line runs, which the two tests above rule out."""
    client = redis.Redis.from_url(redis_url)
    try:
        scripts = [
            s
            for s in [*vars(_scripts).values(), _check.INSPECT, _check.REPAIR]
            if isinstance(s, _scripts.Script)
        ]
        for s in scripts:
            assert s.source == compose(s.name, script_text(s.name).encode(), _scripts.piece)
            assert b"--@include" not in s.source
            assert client.script_load(s.source) == s.sha
    finally:
        client.close()


def test_a_script_carries_only_its_pieces() -> None:
    """The read-only scripts that judge no record carry no piece; the
    hot scripts do not carry the admin scripts' pieces."""
    assert _scripts.PEEK_READY.source == LUA.joinpath("peek_ready.lua").read_bytes()
    assert _scripts.GROUP_ARRIVE.source == LUA.joinpath("group_arrive.lua").read_bytes()
    for hot in (_scripts.ENQUEUE, _scripts.RENEW, _scripts.SETTLE, _scripts.LEASE):
        assert b"local function inspect_fields" not in hot.source
        assert b"local function read_one" not in hot.source
    assert b"local function earliest" in _scripts.LEASE.source
    assert b"local function earliest" not in _scripts.SETTLE.source
