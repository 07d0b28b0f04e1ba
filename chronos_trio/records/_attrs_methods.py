"""``__repr__``, ``__eq__`` and ``__hash__`` shared by our attrs classes,
instead of the ones attrs generates for each class.

attrs writes each class's methods as Python source and compiles it when the
class is defined (at import), and compiling was the largest part of a
worker's start-up that is ours: the reprs were about 40 % of the source for
the ~110 classes a worker loads before its first job, ``__eq__`` and
``__hash__`` another 35 %. A class that names these functions in its body
gets none generated (``attrs.define`` and ``attrs.frozen`` leave a method
the class defines itself; an explicit ``eq=True`` or ``repr=True`` would
make attrs generate its own all the same). ``tests/test_startup.py`` fails
when a class a worker loads before its first job has generated ones::

    @attrs.frozen
    class Point:
        __repr__ = fields_repr
        __eq__ = fields_eq
        __hash__ = fields_hash

        x: int
        y: int

They behave as the generated ones:

* :func:`fields_repr`: ``Name(field=value!r, ...)`` over the fields attrs
  shows (``repr=False`` ones left out, a field's own ``repr`` callable
  used, an ``init=False`` field not set yet shown as ``NOTHING``), ``...``
  for an instance already being repr'd on this thread (a cycle).
* :func:`fields_eq`: ``NotImplemented`` unless both are of the very same
  class, then the fields that take part in ``eq`` compared as tuples (what
  attrs documents).
* :func:`fields_hash`: the hash of the class and the fields that take part
  in hashing, so equal instances hash equal. A class whose instances are
  mutable names only ``__eq__`` (Python then makes it unhashable, as attrs
  does).

What each class compares is read from ``attrs.fields`` at its first
comparison or hash and kept (a tuple getter per class), so one costs a dict
look-up more than a generated method. A comparison of two instances of a
class: the values as two tuples, so a field holding the very same object
on both sides is equal to itself (a tuple's rule; attrs' generated ``==``
of a float NaN in one object with itself is False).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import attrgetter

import attrs

#: The instances being repr'd on each thread (a cycle prints ``...``).
_active = threading.local()


def fields_repr(self: attrs.AttrsInstance) -> str:
    """The repr attrs would generate for ``self`` (an instance of an attrs
    class): ``Name(a=1, b='x')``, ``Name`` the class's ``__qualname__`` after
    any ``<locals>.`` part. Raises what a field's ``repr`` raises, and
    ``AttributeError`` for a field not set yet (as attrs' own does)."""
    try:
        seen: set[int] = _active.seen
    except AttributeError:
        seen = _active.seen = set()
    if id(self) in seen:
        return "..."
    seen.add(id(self))
    try:
        shown = ", ".join(
            f"{field.name}={_shown(field, self)}"
            for field in attrs.fields(self.__class__)
            if field.repr is not False
        )
        return f"{self.__class__.__qualname__.rsplit('>.', 1)[-1]}({shown})"
    finally:
        seen.discard(id(self))


def _shown(field: attrs.Attribute[object], instance: object) -> str:
    """One field's value as its repr shows it (a field ``init=False`` not
    set yet: ``NOTHING``, as attrs shows it)."""
    value = (
        getattr(instance, field.name)
        if field.init
        else getattr(instance, field.name, attrs.NOTHING)
    )
    return field.repr(value) if callable(field.repr) else repr(value)


def fields_eq(self: attrs.AttrsInstance, other: object) -> bool:
    """``self == other`` as attrs generates it: ``NotImplemented`` unless
    ``other`` is of ``self``'s very class, else whether the fields with
    ``eq`` (their ``eq_key`` applied) are equal, compared as tuples."""
    if other.__class__ is not self.__class__:
        return NotImplemented  # type: ignore[no-any-return]  # as any __eq__ may
    values = (_by_class.get(self.__class__) or _compared(self.__class__)).eq
    return values(self) == values(other)


def fields_hash(self: attrs.AttrsInstance) -> int:
    """The hash of ``self``'s class and of the fields that take part in
    hashing (``hash=True``, or ``eq`` when ``hash`` is not set; their
    ``eq_key`` applied), as attrs generates it for a frozen class."""
    compared = _by_class.get(self.__class__) or _compared(self.__class__)
    return hash((compared.seed, *compared.hash(self)))


@attrs.frozen(eq=False)
class _Compared:
    """What one class's ``__eq__`` and ``__hash__`` read."""

    __repr__ = fields_repr

    eq: Callable[[object], tuple[object, ...]]
    hash: Callable[[object], tuple[object, ...]]
    seed: int


#: Per class, made at its first comparison or hash.
_by_class: dict[type, _Compared] = {}


def _compared(cls: type) -> _Compared:
    """``cls``'s getters of the values its ``__eq__`` and ``__hash__`` use,
    and its hash seed: made and kept (at its first comparison or hash)."""
    fields = attrs.fields(cls)
    found = _by_class[cls] = _Compared(
        eq=_getter([f for f in fields if f.eq]),
        hash=_getter([f for f in fields if f.hash is True or (f.hash is None and f.eq is True)]),
        seed=hash(f"{cls.__module__}.{cls.__qualname__}"),
    )
    return found


def _getter(fields: list[attrs.Attribute[object]]) -> Callable[[object], tuple[object, ...]]:
    """A function of an instance: the values of ``fields``, in order, each
    through its ``eq_key`` if it has one."""
    keyed = [(f.name, getattr(f, "eq_key", None)) for f in fields]  # not in attrs' stubs
    if any(key for _, key in keyed):
        return lambda instance: tuple(
            key(getattr(instance, name)) if key else getattr(instance, name) for name, key in keyed
        )
    names = [f.name for f in fields]
    if len(names) > 1:
        many: Callable[[object], tuple[object, ...]] = attrgetter(*names)
        return many
    if names:
        one = attrgetter(names[0])
        return lambda instance: (one(instance),)
    return lambda instance: ()
