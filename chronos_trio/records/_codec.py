"""Payload (de)serialization: attrs classes <-> JSON via cattrs, or raw bytes.

Pickle is never used: a payload is data any language can read. cattrs turns
values into plain JSON types; orjson writes and parses the text (several
times faster than the standard library, on every enqueue and every run).
Where orjson would differ from strict JSON as ``json`` reads and writes it
(integers beyond 64 bits, which it cannot write and parses as floats;
NaN/Infinity, which it writes as null) the standard library decides, so
nothing changes in transit: big integers round-trip exactly and NaN/Infinity
are refused at enqueue. A ``None`` (null) keeps orjson's speed: only output
that does not read back as its input (a NaN became null) goes to ``json``.

cattrs is imported when a value first needs it (``converter``, PEP 562): a
plain ``str``, number, bool or None, and a payload decoded as ``Any``, never
do, so a worker whose first jobs are of those starts without it. Nor does a
payload decoded as ``int``, ``str``, ``float`` or ``bool``: cattrs structures
those by calling the type on the parsed value, and :func:`decode_payload`
does the same itself, with the same results and the same errors.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from ._errors import PayloadError

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

    #: One converter for every payload; it knows datetimes, enums, attrs classes.
    converter: JsonConverter


@functools.cache
def _converter() -> JsonConverter:
    from cattrs.preconf.json import make_converter

    return make_converter()


def __getattr__(name: str) -> Any:
    if name == "converter":
        return _converter()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Types cattrs structures by calling them on the parsed value
#: (``BaseConverter._structure_call``): decoded the same way without it.
_STRUCTURED_BY_CALL = (int, str, float, bool)

#: Values that are their own JSON form (cattrs would return them as they are).
_NONE_TYPE = type(None)
_PLAIN = frozenset({str, int, float, bool, _NONE_TYPE})

_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS
_COPY_BELOW = 1024
#: An integer orjson cannot hold in 64 bits (it reads it as a float) has 20+
#: digits, or 19 after a minus sign (below -2**63 = -9223372036854775808).
#: Found by mapping every digit to "0" and searching for such a run: several
#: times faster than a regex scan, which cost more than the parse itself.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_TWENTY_DIGITS = b"0" * 20
_MINUS_NINETEEN_DIGITS = b"-" + b"0" * 19


def _strict_dumps(raw: Any) -> bytes:
    return json.dumps(raw, separators=(",", ":"), allow_nan=False).encode()


def dumps(raw: Any) -> bytes:
    """Compact, strict JSON of plain (unstructured) data; raises TypeError or
    ValueError when it is not JSON-able (NaN and Infinity included)."""
    try:
        out = orjson.dumps(raw, option=_DUMPS_OPTIONS)
    except orjson.JSONEncodeError:
        # Big integers: the standard library writes them (or raises a clear error).
        return _strict_dumps(raw)
    if b"null" in out and orjson.loads(out) != raw:
        # orjson writes NaN/Infinity as null, and NaN or inf never equals the
        # None read back in its place: let the standard library refuse them.
        # Output with only real nulls reads back equal and is kept. (Int keys
        # and tuples read back as str keys and lists: a payload with those and
        # a null still comes here, for the same result at the old cost plus
        # the read-back.)
        return _strict_dumps(raw)
    # orjson's output starts as a ~1 KiB buffer shrunk in place; a small
    # payload kept alive (as every enqueued one is until sent) pins that
    # allocation, which made dumps 4x slower in a batch. A compact copy lets
    # the buffer be reused at once.
    return bytes(memoryview(out)) if len(out) < _COPY_BELOW else out


def encode_payload(value: Any, payload_type: Any, *, what: str = "payload") -> bytes:
    """Encode ``value`` for the store. ``bytes`` pass through unchanged.
    Raises ``PayloadError`` (naming ``what``: a payload, a result) when it is
    not of ``payload_type`` (a class) or not JSON-able."""
    if payload_type is bytes or isinstance(value, bytes | bytearray | memoryview):
        if not isinstance(value, bytes | bytearray | memoryview):
            raise PayloadError(f"expected a bytes {what}, got {type(value).__name__}")
        return bytes(value)
    if payload_type is not None and payload_type is not Any and isinstance(payload_type, type):
        if not isinstance(value, payload_type):
            raise PayloadError(
                f"expected a {payload_type.__name__} {what}, got {type(value).__name__}"
            )
    try:
        return dumps(value if type(value) in _PLAIN else _converter().unstructure(value))
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"{what} of type {type(value).__name__} is not JSON-able: {exc}"
        ) from exc


def payload_encoder(payload_type: Any) -> Callable[[Any], bytes]:
    """``encode_payload(value, payload_type)`` as one function for many
    values (a bulk enqueue's loop): for an attrs class, its cattrs
    unstructure hook is looked up once, and a value of exactly that class
    is encoded without a dispatch per value; any other value takes
    :func:`encode_payload`. Raises what it raises."""
    if not (isinstance(payload_type, type) and hasattr(payload_type, "__attrs_attrs__")):
        return functools.partial(_encode_as, payload_type=payload_type)
    hook = _unstructure_hook(payload_type)

    def encode(value: Any) -> bytes:
        if type(value) is not payload_type:
            return encode_payload(value, payload_type)
        try:
            return dumps(hook(value))
        except (TypeError, ValueError) as exc:
            raise PayloadError(
                f"payload of type {payload_type.__name__} is not JSON-able: {exc}"
            ) from exc

    return encode


#: :func:`payload_encoder` by payload type, made once per type (bounded).
_ENCODERS: dict[Any, Callable[[Any], bytes]] = {}


def cached_payload_encoder(payload_type: Any) -> Callable[[Any], bytes]:
    """:func:`payload_encoder` of ``payload_type``, made on first use and kept
    (a task's one-at-a-time enqueue looks its hook up once, not per job).
    Raises what ``payload_encoder`` raises."""
    try:
        return _ENCODERS[payload_type]
    except KeyError:
        pass
    except TypeError:  # an unhashable type: not kept
        return payload_encoder(payload_type)
    encode = payload_encoder(payload_type)
    if len(_ENCODERS) > 10_000:  # bound the cache; making one again is cheap
        _ENCODERS.clear()
    _ENCODERS[payload_type] = encode
    return encode


def batch_encoder(payload_type: Any) -> Callable[[Sequence[Any]], list[bytes] | None]:
    """For a bulk enqueue: a function that encodes many values of one attrs
    class at once, as :func:`payload_encoder`'s function would one by one
    (the same bytes), or returns None when it cannot vouch for that: a
    value of another type, one that does not unstructure or dump, one whose
    JSON holds a ``null`` (it may stand for a NaN): the caller then encodes
    them one by one, which gives the same bytes or raises the same error as
    ever. The class is ``payload_type`` (an attrs class); for ``Any`` or
    None (a payload of any type), that of the first value, when it is an
    attrs class (``encode_payload`` unstructures such a value by its class's
    hook, the one used here). For another payload type, the function always
    returns None."""
    if payload_type is Any or payload_type is None:
        return _encode_any
    if not (isinstance(payload_type, type) and hasattr(payload_type, "__attrs_attrs__")):
        return _cannot
    return _attrs_batch_encoder(payload_type)


def _encode_any(values: Sequence[Any]) -> list[bytes] | None:
    """:func:`batch_encoder`'s function for a payload of any type."""
    if not values:
        return []
    cls = type(values[0])
    if not hasattr(cls, "__attrs_attrs__"):
        return None
    return _attrs_batch_encoder(cls)(values)


def _attrs_batch_encoder(payload_type: type) -> Callable[[Sequence[Any]], list[bytes] | None]:
    """:func:`batch_encoder`'s function for values of exactly the attrs class
    ``payload_type``."""
    hook = _unstructure_hook(payload_type)
    dump, options, copy, view = orjson.dumps, _DUMPS_OPTIONS, bytes, memoryview

    def encode_all(values: Sequence[Any]) -> list[bytes] | None:
        # by identity: a type's own __eq__ or __hash__ (a metaclass's) is not consulted
        if values and set(map(id, map(type, values))) != {id(payload_type)}:
            return None
        try:
            # a compact copy of each as it is made, as dumps makes (see
            # there): copied at the end, the batch's outputs pinned a
            # buffer each meanwhile, which cost more than the dumps
            outs = [
                out if len(out := dump(raw, option=options)) >= _COPY_BELOW else copy(view(out))
                for raw in map(hook, values)
            ]
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            return None
        # "\n" is never in compact JSON but escaped: no null is made across two
        if b"null" in b"\n".join(outs):
            return None
        return outs

    return encode_all


def _cannot(values: Sequence[Any]) -> None:
    return None


def _unstructure_hook(payload_type: type) -> Callable[[Any], Any]:
    converter = _converter()
    get_hook: Any = getattr(converter, "get_unstructure_hook", None)
    if get_hook is None:  # cattrs < 24
        get_hook = getattr(converter, "_unstructure_func").dispatch  # noqa: B009
    hook: Callable[[Any], Any] = get_hook(payload_type)
    return hook


def _encode_as(value: Any, payload_type: Any) -> bytes:
    return encode_payload(value, payload_type)


def loads(data: bytes) -> Any:
    """Parse JSON text; raises ``ValueError`` when it is not JSON."""
    if not _may_hold_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the standard library raises its own error, or reads NaN (older data)
    return json.loads(data)


def _may_hold_long_integer(data: bytes) -> bool:
    """True when ``data`` has a run of digits that may be an integer beyond
    64 bits (in a string too: then the standard library parses, no harm)."""
    digits = data.translate(_DIGITS_TO_ZERO)
    return _TWENTY_DIGITS in digits or _MINUS_NINETEEN_DIGITS in digits


def decode_payload(data: bytes, payload_type: Any) -> Any:
    """Decode stored bytes into ``payload_type``; raises ``PayloadError`` with
    the cause when the data is not JSON or does not structure as that type."""
    if payload_type is bytes:
        return data
    try:
        raw = loads(data)
    except ValueError as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from exc
    if payload_type is None or payload_type is Any:
        return raw
    if payload_type is _NONE_TYPE:  # a handler that takes ``x: None``
        if raw is None:
            return None
        raise PayloadError(f"payload does not structure as None: got {type(raw).__name__}")
    try:
        if payload_type in _STRUCTURED_BY_CALL:
            return payload_type(raw)
        return _converter().structure(raw, payload_type)
    except Exception as exc:  # cattrs raises ClassValidationError and friends
        name = getattr(payload_type, "__name__", repr(payload_type))
        raise PayloadError(f"payload does not structure as {name}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    notes = getattr(exc, "__notes__", None)
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({'; '.join(notes)})" if notes else text
