"""One judgement of a job record: which fields a usable record holds, of
what type, in which states (issue 23, item 9).

Every path that judges a record decides by :data:`RULES`: the lease that
hands it to a worker, recovery, settle and renew, the admin reads that show
it, the store checker that reports and repairs it, and the executor's last
look before it runs a job, on every store. A record is *usable* when each
field judged in its state holds a value of the field's type; otherwise it is
*damaged*, and whatever meets it dead-letters it ("damaged record: <field
and value>") instead of using it.

* A field is judged in the states its rule lists (every state when it lists
  none). In the other states it means nothing, and any value is accepted:
  the transition that gives it a meaning writes it first (a lease writes
  the lease fields, a finish writes ``finished_at``). So no path sets aside
  a record for a field it is about to overwrite, and none hands on a record
  whose meaningful fields it did not judge.
* ``required``: the field must hold a value (on Redis: be present and not
  empty); otherwise it may be absent (``None`` in memory, no field or an
  empty one on Redis), and when present it must still be of its type.
* Texts that only identify or describe (``last_error``, the lease token
  and owner) are never damage for their bytes: they are shown with escapes.
  A task kind must be UTF-8 text: it names the handler.

Two readers apply the table: :func:`stored_damage` to a Redis hash (bytes),
:func:`value_damage` to a MemoryStore record (Python values, which must also
be of their Python type in every state: code reads them as such). The Redis
scripts judge the fields they read or overwrite with the same rules
(``lua/lib/check_*.lua``, held to these by
``tests/test_record_judgement.py``); fields a script neither reads nor
overwrites keep their damage to where the lease (the gate to running) or the
checker judges it.

The compiled judgements (one predicate per kind, one record check per
state) are compiled on first use, each once, not at import: a worker
compiles the few it meets before its first job.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ..records._control import PRIORITY_MAX, PRIORITY_MIN, JobControl, decode_control
from ..records._jobs import FINISHED_STATES, Job, JobState
from ..records._options import decode_headers
from ._roles import DAMAGED_RECORD

#: Counts at or above this are damage (the Redis store reads at most 15 digits).
COUNT_LIMIT = 10**15
_SHOW_CUT = 40


class Kind(enum.Enum):
    """What a field holds; the value is what a message says it is not."""

    TASK = "UTF-8 text"  # a task kind: non-empty
    PAYLOAD = "bytes"
    TIME = "a number"  # finite
    TIMEOUT = "a positive number"  # > 0; infinite is allowed (no timeout)
    COUNT = "an integer >= 0"
    STATE = "a job state"
    TOKEN = "a lease token"  # any text, not empty
    TEXT = "text"  # any text
    HEADERS = "a JSON object of text headers"
    CONTROL = "flow control items"


@attrs.frozen
class Rule:
    """One field of a job record: its ``Job`` attribute, its Redis hash
    field, what it holds, and when it is judged and required."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    stored: str
    kind: Kind
    required: bool
    #: The states it is judged in (None: every state).
    states: frozenset[JobState] | None = None

    def judged(self, state: JobState | None) -> bool:
        """Whether the field is judged in a record of ``state`` (None: a
        record whose state is unreadable: then only the fields judged in
        every state are, as nothing says what the others mean)."""
        return self.states is None or (state is not None and state in self.states)


_LEASED = frozenset({JobState.LEASED})

#: The fields of a job record, in the order their problems are named.
RULES = (
    Rule("kind", "kind", Kind.TASK, True),
    Rule("payload", "payload", Kind.PAYLOAD, True),
    Rule("run_at", "run_at", Kind.TIME, True),
    Rule("state", "state", Kind.STATE, True),
    Rule("attempts", "attempts", Kind.COUNT, True),
    Rule("max_retries", "max_retries", Kind.COUNT, True),
    Rule("timeout", "timeout", Kind.TIMEOUT, True),
    Rule("lease_token", "lease_token", Kind.TOKEN, True, _LEASED),
    Rule("lease_owner", "lease_owner", Kind.TEXT, False, _LEASED),
    Rule("lease_expires_at", "lease_expires_at", Kind.TIME, True, _LEASED),
    Rule("last_error", "last_error", Kind.TEXT, False),
    Rule("created_at", "created_at", Kind.TIME, True),
    Rule("finished_at", "finished_at", Kind.TIME, True, FINISHED_STATES),
    Rule("result_until", "result_until", Kind.TIME, False, frozenset({JobState.SUCCEEDED})),
    Rule("headers", "h", Kind.HEADERS, False),
    Rule("control", "fc", Kind.CONTROL, False),
)
RULE_OF = {rule.name: rule for rule in RULES}

#: What a dead-lettered record is still judged by (it keeps its other
#: damaged fields, for an operator to see): what the dead index needs.
DAMAGED_DEAD_NEEDS = ("finished_at",)

_STATES = {s.value.encode(): s for s in JobState}
_DAMAGED = DAMAGED_RECORD.encode()


# -- stored values (bytes: the RedisStore) -------------------------------------------------
def show_stored(value: bytes) -> str:
    """A stored value for a message: ``b'...'``, printable ASCII as is,
    anything else escaped, cut after 40 bytes (the same text as ``show``
    in ``lua/lib/show.lua``, so both sides name values alike)."""
    cut = value[:_SHOW_CUT]
    body = "".join(_SHOW_BYTE[b] for b in cut)
    tail = f"... ({len(value)} bytes)" if len(value) > _SHOW_CUT else ""
    return f"b'{body}'{tail}"


def _show_byte(b: int) -> str:
    special = {0x5C: "\\\\", 0x27: "\\'", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
    if b in special:
        return special[b]
    if b < 0x20 or b >= 0x7F:
        return f"\\x{b:02x}"
    return chr(b)


_SHOW_BYTE = [_show_byte(b) for b in range(256)]


def parse_number(value: bytes, *, infinite: bool = False) -> float | None:
    """A stored decimal number, or None: exactly the texts ``check_number``
    in ``lua/lib/check_number.lua`` accepts (Python's float() reads underscores, Lua
    hexadecimal: neither counts; float() reads no hexadecimal, nor any text
    with an x). Finite unless ``infinite``; never NaN. On every leased job's
    fields: kept to a float() and two tests for a finite number."""
    try:
        x = float(value)
    except ValueError:
        return None
    if x - x == 0:  # finite (inf - inf and NaN are NaN)
        return None if b"_" in value else x
    if infinite and x == x and b"_" not in value:
        return x
    return None


def parse_count(value: bytes) -> int | None:
    """A stored non-negative integer (decimal digits, at most 15), or None."""
    # bytes.isdigit: ASCII digits only, and False for b""
    return int(value) if value.isdigit() and len(value) <= 15 else None


def parse_state(value: bytes) -> JobState | None:
    return _STATES.get(value)


def _stored_ok(kind: Kind, value: bytes) -> bool:
    """Whether a present, non-empty stored ``value`` is of ``kind``."""
    if kind is Kind.TASK:
        try:
            value.decode()
        except UnicodeDecodeError:
            return False
        return True
    if kind is Kind.TIME:
        return parse_number(value) is not None
    if kind is Kind.TIMEOUT:
        x = parse_number(value, infinite=True)
        return x is not None and x > 0
    if kind is Kind.COUNT:
        return parse_count(value) is not None
    if kind is Kind.STATE:
        return value in _STATES
    if kind is Kind.HEADERS:
        try:
            decode_headers(value)
        except (ValueError, TypeError):
            return False
        return True
    if kind is Kind.CONTROL:
        try:
            decode_control(value.decode())
        except (ValueError, UnicodeDecodeError):
            return False
        return True
    return True  # PAYLOAD, TOKEN, TEXT: any bytes


def stored_problem(rule: Rule, value: bytes | None) -> str | None:
    """Why a stored ``value`` of ``rule``'s field (None: absent) is damage,
    or None. Judged as a field of a record in which the rule applies."""
    name = rule.stored
    if value is None or (value == b"" and rule.kind is not Kind.PAYLOAD):
        if not rule.required:
            return None
        return f"field {name!r} is {'missing' if value is None else 'empty'}"
    if _stored_ok(rule.kind, value):
        return None
    what = rule.kind.value
    if rule.kind is Kind.TIMEOUT and parse_number(value, infinite=True) is None:
        what = Kind.TIME.value  # not a number at all
    return f"field {name!r} holds {show_stored(value)}, not {what}"


def stored_state(fields: Mapping[str, bytes | None]) -> JobState | None:
    raw = fields.get("state")
    return None if raw is None else _STATES.get(raw)


def damaged_already(state: JobState | None, last_error: bytes | None) -> bool:
    """A record this store (or the checker) already dead-lettered as
    damaged: it needs only what the dead index needs
    (:data:`DAMAGED_DEAD_NEEDS`)."""
    return state is JobState.DEAD and (last_error or b"").startswith(_DAMAGED)


def stored_damage(
    fields: Mapping[str, bytes | None],
    *,
    state: JobState | None = None,
    reading: bool = False,
) -> dict[str, str]:
    """Every field of a stored record (``fields``: stored field name ->
    value, None or missing when absent) that makes it unusable, mapped to
    its ``Job`` field name and why; empty for a usable record. ``state``:
    the state to judge it in (default: the one it holds). ``reading``: every
    field a reader cannot take as it is, also those of a record already
    dead-lettered as damaged. Never raises."""
    if state is None:
        state = stored_state(fields)
    names = None
    if not reading and damaged_already(state, fields.get("last_error")):
        names = DAMAGED_DEAD_NEEDS
    out: dict[str, str] = {}
    for rule in RULES:
        if (names is None or rule.name in names) and rule.judged(state):
            why = stored_problem(rule, fields.get(rule.stored))
            if why is not None:
                out[rule.name] = why
    return out


# -- Python values (the MemoryStore's records, a Job handed to a worker) -------------------
def show_value(value: object) -> str:
    """``repr(value)``, cut after 40 characters with the full length noted."""
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is still shown, never raised
        text = f"<{type(value).__name__}>"
    if len(text) <= _SHOW_CUT:
        return text
    size = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:_SHOW_CUT]}... ({size} long)"


def is_number(value: object) -> bool:
    """A float, or an int small enough to be one; NaN is not a number."""
    if type(value) is float:
        return value == value
    return type(value) is int and -(2**1023) < value < 2**1023  # type: ignore[operator, unused-ignore]


def is_count(value: object) -> bool:
    return type(value) is int and 0 <= value < COUNT_LIMIT  # type: ignore[operator, unused-ignore]


def _headers_ok(value: object) -> bool:
    return type(value) is tuple and all(
        type(pair) is tuple
        and len(pair) == 2
        and type(pair[0]) is str
        and pair[0] != ""
        and type(pair[1]) is str
        for pair in value
    )


def _control_ok(value: object) -> bool:
    return (
        isinstance(value, JobControl)
        and type(value.priority) is int
        and PRIORITY_MIN <= value.priority <= PRIORITY_MAX
    )


#: Each kind's test of a value ``v``, as one Python expression: the one
#: definition, compiled once into the per-kind predicates (``_VALUE_OK``)
#: and the per-state record checks (:func:`value_sound`, which runs on
#: every record each store operation meets, so its tests are inlined).
_VALUE_EXPR = {
    Kind.TASK: "(type(v) is str and v != '')",
    Kind.PAYLOAD: "(type(v) is bytes)",
    # a float, or an int a float can hold; v - v == 0 is False for inf and NaN
    Kind.TIME: "((type(v) is float and v - v == 0) or (type(v) is int and -_BIG < v < _BIG))",
    # infinite is allowed (no timeout); NaN > 0 is False
    Kind.TIMEOUT: "((type(v) is float and v > 0) or (type(v) is int and 0 < v < _BIG))",
    Kind.COUNT: "(type(v) is int and 0 <= v < COUNT_LIMIT)",
    Kind.STATE: "isinstance(v, JobState)",
    Kind.TOKEN: "(type(v) is str and v != '')",
    Kind.TEXT: "(type(v) is str)",
    Kind.HEADERS: "(v == () or _headers_ok(v))",
    Kind.CONTROL: "_control_ok(v)",
}
_EXPR_SCOPE: dict[str, Any] = {
    "_BIG": 2**1023,
    "COUNT_LIMIT": COUNT_LIMIT,
    "JobState": JobState,
    "_headers_ok": _headers_ok,
    "_control_ok": _control_ok,
}
_K = TypeVar("_K")
_V = TypeVar("_V")


class _OnFirstUse(dict[_K, _V], Generic[_K, _V]):
    """A table whose entry for a key is made by ``make(key)`` when first
    looked up, then kept: a lookup costs what a dict's does. ``make``
    raises KeyError for a key that has no entry."""

    def __init__(self, make: Callable[[_K], _V]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, key: _K) -> _V:
        value = self[key] = self._make(key)
        return value


def _compile_value_ok(kind: Kind) -> Callable[[Any], bool]:
    # (source built from the constant table above, never from data)
    check: Callable[[Any], bool] = eval(f"lambda v: {_VALUE_EXPR[kind]}", dict(_EXPR_SCOPE))
    return check


#: Per kind, its compiled test (made on first use).
_VALUE_OK: _OnFirstUse[Kind, Callable[[Any], bool]] = _OnFirstUse(_compile_value_ok)

#: Kinds whose value may be None when not required (the Job's default).
_NONE_WHEN_OPTIONAL = frozenset({Kind.TIME, Kind.CONTROL})


def value_problem(rule: Rule, value: object, *, required: bool | None = None) -> str | None:
    """Why a Python ``value`` of ``rule``'s field is damage, or None.
    ``required``: whether it must hold a value (default: the rule's)."""
    need = rule.required if required is None else required
    if value is None and not need and rule.kind in _NONE_WHEN_OPTIONAL:
        return None
    if rule.kind is Kind.TOKEN and not need and type(value) is str:
        return None  # a token only a leased job must have
    if _VALUE_OK[rule.kind](value):
        return None
    what = "text" if rule.kind is Kind.TOKEN and not need else rule.kind.value
    if rule.kind is Kind.TASK:
        what = "a task kind"
    elif rule.kind is Kind.CONTROL:
        what = "flow control (a JobControl) or None"
    elif rule.kind is Kind.TIME and not need:
        what = "a number or None"
    elif rule.kind is Kind.TIMEOUT and not is_number(value):
        what = Kind.TIME.value  # not a number at all
    return f"field {rule.name!r} holds {show_value(value)}, not {what}"


def value_ok(rule: Rule, *, required: bool | None = None) -> Callable[[object], bool]:
    """A predicate true exactly when :func:`value_problem` finds nothing in
    a value of ``rule``'s field (no message built): the fast path of every
    judgement of a sound field."""
    need = rule.required if required is None else required
    ok = _VALUE_OK[rule.kind]
    if not need and rule.kind in _NONE_WHEN_OPTIONAL:
        return lambda v: v is None or ok(v)
    if not need and rule.kind is Kind.TOKEN:
        return lambda v: type(v) is str
    return ok


def _sound_check(state: JobState | None, rules: tuple[Rule, ...] = RULES) -> Callable[[Job], bool]:
    """``job -> bool`` for records of ``state``: every field of ``rules`` as
    :func:`value_ok` judges it there, compiled into one function."""
    lines = ["def sound(job):"]
    for rule in rules:
        need = rule.required and rule.judged(state)
        test = _VALUE_EXPR[rule.kind]
        if not need and rule.kind in _NONE_WHEN_OPTIONAL:
            test = f"(v is None or {test})"
        elif not need and rule.kind is Kind.TOKEN:
            test = "(type(v) is str)"
        lines += [f"    v = job.{rule.name}", f"    if not {test}: return False"]
    lines.append("    return True")
    scope = dict(_EXPR_SCOPE)
    exec("\n".join(lines), scope)  # source built from RULES and _VALUE_EXPR, never from data
    check: Callable[[Job], bool] = scope["sound"]
    return check


def _sound_in(state: JobState | None) -> Callable[[Job], bool]:
    if state is not None and not isinstance(state, JobState):
        raise KeyError(state)
    return _sound_check(state)


#: Per record state (None: unreadable), its compiled check (see
#: value_sound), made on first use.
_SOUND_IN: _OnFirstUse[JobState | None, Callable[[Job], bool]] = _OnFirstUse(_sound_in)


def fields_sound(names: tuple[str, ...]) -> Callable[[Job], bool]:
    """A compiled ``job -> bool``: whether each of the fields ``names``
    holds a value :func:`value_problem` finds nothing in (as judged in
    every state), for a caller that reads only those (the executor)."""
    return _sound_check(None, tuple(RULE_OF[name] for name in names))


def value_sound(job: Job) -> bool:
    """Whether :func:`value_damage` finds nothing in ``job``, without
    building a message: what every store operation pays for a sound record."""
    state = job.state
    return _SOUND_IN[state if isinstance(state, JobState) else None](job)


def value_damage(job: Job) -> dict[str, str]:
    """Every field of ``job`` (a Python record) that makes it unusable,
    mapped to why; empty for a usable one. A field not judged in the
    record's state must still hold its Python type (any value of it): code
    reads it as such. Never raises."""
    if value_sound(job):
        return {}
    state = job.state if isinstance(job.state, JobState) else None
    out: dict[str, str] = {}
    for rule in RULES:
        value = getattr(job, rule.name)
        judged = rule.judged(state)
        why = value_problem(rule, value, required=rule.required and judged)
        if why is not None:
            out[rule.name] = why
    return out
