"""``records._repr.fields_repr``: the one ``__repr__`` our attrs classes
share prints what attrs' generated one prints. Each case defines a class
twice, once with attrs' repr and once with ours, and compares them."""

from __future__ import annotations

import threading
from typing import Any

import attrs

import chronos_trio
from chronos_trio.records._repr import fields_repr


def _shows(kwargs: dict[str, Any], **fields: Any) -> tuple[str, str]:
    """attrs' repr and ours of the same frozen class (``fields``: name ->
    ``attrs.field``), built with ``kwargs``."""

    def make(ours: bool) -> type:
        body: dict[str, Any] = dict(fields)
        if ours:
            body["__repr__"] = fields_repr
        return attrs.frozen(type("Rec", (), body))

    theirs, mine = make(False), make(True)
    assert vars(mine)["__repr__"] is fields_repr
    assert vars(theirs)["__repr__"] is not fields_repr
    return repr(theirs(**kwargs)), repr(mine(**kwargs))


def test_plain_fields_show_the_same() -> None:
    theirs, ours = _shows(
        {"a": 1, "b": "x", "c": (1.5, None)},
        a=attrs.field(),
        b=attrs.field(),
        c=attrs.field(),
    )
    assert ours == theirs == "Rec(a=1, b='x', c=(1.5, None))"


def test_hidden_fields_and_own_reprs_show_the_same() -> None:
    theirs, ours = _shows(
        {"a": 1, "secret": "s", "b": 7},
        a=attrs.field(),
        secret=attrs.field(repr=False),
        b=attrs.field(repr=lambda v: f"<{v}>"),
    )
    assert ours == theirs == "Rec(a=1, b=<7>)"


def test_fields_not_in_init_show_the_same_set_or_not() -> None:
    unset_theirs, unset_ours = _shows({}, late=attrs.field(init=False))
    assert unset_ours == unset_theirs == "Rec(late=NOTHING)"
    theirs, ours = _shows({}, late=attrs.field(init=False, default=3))
    assert ours == theirs == "Rec(late=3)"


def test_a_class_in_a_function_shows_its_name_without_locals() -> None:
    @attrs.frozen
    class Theirs:
        a: int

    @attrs.frozen
    class Ours:
        __repr__ = fields_repr
        a: int

    assert "<locals>" in Ours.__qualname__
    assert repr(Ours(1)) == repr(Theirs(1)).replace("Theirs", "Ours") == "Ours(a=1)"


def test_a_cycle_shows_dots_as_attrs_does() -> None:
    @attrs.define
    class Theirs:
        other: Any = None

    @attrs.define
    class Ours:
        __repr__ = fields_repr
        other: Any = None

    theirs, ours = Theirs(), Ours()
    theirs.other, ours.other = [theirs], [ours]
    assert repr(ours) == repr(theirs).replace("Theirs", "Ours") == "Ours(other=[...])"
    # and the guard is left clean: the same instance shows in full again
    assert repr([ours, ours]) == "[Ours(other=[...]), Ours(other=[...])]"


def test_the_cycle_guard_is_per_thread() -> None:
    @attrs.frozen
    class Slow:
        __repr__ = fields_repr
        wait: Any

    class Gate:
        def __init__(self) -> None:
            self.entered, self.leave = threading.Event(), threading.Event()

        def __repr__(self) -> str:
            self.entered.set()
            assert self.leave.wait(10)
            return "gate"

    gate = Gate()
    shared = Slow(gate)
    shown: list[str] = []
    thread = threading.Thread(target=lambda: shown.append(repr(shared)))
    thread.start()
    try:
        assert gate.entered.wait(10)  # the other thread is inside shared's repr
        gate.leave.set()
        assert repr(shared) == "Slow(wait=gate)"  # not "..." here
    finally:
        thread.join(10)
    assert shown == ["Slow(wait=gate)"]


def test_a_public_record_shows_as_before() -> None:
    ref = chronos_trio.JobRef(queue="default", job_id="j1")
    assert vars(chronos_trio.JobRef)["__repr__"] is fields_repr
    assert repr(ref) == "JobRef(job_id='j1', queue='default', placement=None)"
