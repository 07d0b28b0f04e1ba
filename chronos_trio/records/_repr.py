"""One ``__repr__`` shared by our attrs classes, instead of one generated per
class.

attrs writes each class's ``__repr__`` as Python source and compiles it when
the class is defined (at import). Those reprs were about 40 % of the source
attrs compiled for the ~110 classes a worker loads before its first job,
and compiling is most of a class's cost at start-up. A class that names
:func:`fields_repr` as its ``__repr__`` in its body gets no generated one
(``attrs.define`` and ``attrs.frozen`` leave a method the class defines
itself), and reprs the same text: ``Name(field=value!r, ...)`` over the
fields attrs shows (``repr=False`` ones left out, a field's own ``repr``
callable used, an ``init=False`` field not set yet shown as ``NOTHING``),
``...`` for an instance already being repr'd on this thread (a cycle).
Reprs are for logs and debugging; none is on a job's path.
"""

from __future__ import annotations

import threading

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
