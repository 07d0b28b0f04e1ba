"""``records._attrs_methods``: the ``__repr__``, ``__eq__`` and ``__hash__``
our attrs classes share behave as the ones attrs generates. Each case
defines a class twice, once with attrs' methods and once with ours, and
compares them."""

from __future__ import annotations

import threading
from typing import Any

import attrs

import chronos_trio
from chronos_trio.records._attrs_methods import fields_eq, fields_hash, fields_repr


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


# -- __eq__ and __hash__ ------------------------------------------------------------------------


def _pair(**fields: Any) -> tuple[type, type]:
    """A frozen class with attrs' ``__eq__``/``__hash__`` and one with ours."""

    def make(ours: bool) -> type:
        body: dict[str, Any] = dict(fields)
        if ours:
            body.update(__eq__=fields_eq, __hash__=fields_hash)
        return attrs.frozen(type("Rec", (), body))

    theirs, mine = make(False), make(True)
    assert vars(mine)["__eq__"] is fields_eq and vars(mine)["__hash__"] is fields_hash
    assert vars(theirs)["__eq__"] is not fields_eq
    return theirs, mine


def _agree(cls_theirs: type, cls_ours: type, a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether attrs' and our classes agree on ``A == B``, ``A != B`` and
    on equal instances hashing equal; the answer to ``A == B``."""
    theirs: bool = cls_theirs(**a) == cls_theirs(**b)
    ours: bool = cls_ours(**a) == cls_ours(**b)
    assert ours == theirs
    assert (cls_ours(**a) != cls_ours(**b)) == (cls_theirs(**a) != cls_theirs(**b)) == (not ours)
    if ours:
        assert hash(cls_ours(**a)) == hash(cls_ours(**b))
    return ours


def test_equal_fields_make_equal_instances_and_equal_hashes() -> None:
    theirs, ours = _pair(a=attrs.field(), b=attrs.field(default=()))
    assert _agree(theirs, ours, {"a": 1}, {"a": 1})
    assert _agree(theirs, ours, {"a": "x", "b": (1, 2)}, {"a": "x", "b": (1, 2)})
    assert not _agree(theirs, ours, {"a": 1}, {"a": 2})
    assert not _agree(theirs, ours, {"a": 1, "b": (1,)}, {"a": 1, "b": (2,)})
    assert hash(ours(a=1)) != hash(ours(a=2))  # the fields are hashed


def test_one_field_and_no_field_compare_as_attrs_does() -> None:
    theirs, ours = _pair(a=attrs.field())
    assert _agree(theirs, ours, {"a": 1}, {"a": 1})
    assert not _agree(theirs, ours, {"a": 1}, {"a": 0})
    theirs, ours = _pair()
    assert _agree(theirs, ours, {}, {})


def test_fields_left_out_of_eq_and_hash_are_left_out() -> None:
    theirs, ours = _pair(
        a=attrs.field(),
        noise=attrs.field(eq=False),
        unhashed=attrs.field(hash=False, default=0),
    )
    # not compared at all
    assert _agree(theirs, ours, {"a": 1, "noise": 1}, {"a": 1, "noise": 2})
    # compared, not hashed: equal instances still hash equal
    assert not _agree(theirs, ours, {"a": 1, "noise": 0, "unhashed": 1}, {"a": 1, "noise": 0})
    assert hash(ours(a=1, noise=0, unhashed=1)) == hash(ours(a=1, noise=0, unhashed=2))


def test_an_eq_key_is_applied_to_compare_and_hash() -> None:
    theirs, ours = _pair(name=attrs.field(eq=str.lower))
    assert _agree(theirs, ours, {"name": "Ab"}, {"name": "aB"})
    assert not _agree(theirs, ours, {"name": "Ab"}, {"name": "aC"})


def test_another_class_is_never_equal() -> None:
    _, ours = _pair(a=attrs.field())
    _, other = _pair(a=attrs.field())
    assert ours(a=1) != other(a=1)
    assert fields_eq(ours(a=1), other(a=1)) is NotImplemented
    assert ours(a=1) != (1,)
    assert {ours(a=1): "x"}[ours(a=1)] == "x"


def test_a_mutable_class_naming_only_eq_is_unhashable_as_attrs_makes_it() -> None:
    @attrs.define
    class Theirs:
        a: int

    @attrs.define
    class Ours:
        __eq__ = fields_eq
        a: int

    assert Ours(1) == Ours(1) and Ours(1) != Ours(2)
    assert Theirs.__hash__ is None and Ours.__hash__ is None


def test_public_records_compare_and_hash_as_values() -> None:
    assert vars(chronos_trio.JobRef)["__eq__"] is fields_eq
    one = chronos_trio.JobRef(queue="default", job_id="j1")
    same = chronos_trio.JobRef(queue="default", job_id="j1")
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    assert one != chronos_trio.JobRef(queue="default", job_id="j2")
