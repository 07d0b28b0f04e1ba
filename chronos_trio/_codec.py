"""Payload (de)serialization: attrs classes <-> JSON via cattrs, or raw bytes.

Pickle is never used: a payload is data any language can read.
"""

from __future__ import annotations

import json
from typing import Any

from cattrs.preconf.json import make_converter

from ._errors import PayloadError

#: One converter for every payload; it knows datetimes, enums, attrs classes.
converter = make_converter()


def encode_payload(value: Any, payload_type: Any) -> bytes:
    """Encode ``value`` for the store. ``bytes`` pass through unchanged."""
    if payload_type is bytes or isinstance(value, bytes | bytearray | memoryview):
        if not isinstance(value, bytes | bytearray | memoryview):
            raise PayloadError(f"expected a bytes payload, got {type(value).__name__}")
        return bytes(value)
    if payload_type is not None and payload_type is not Any and isinstance(payload_type, type):
        if not isinstance(value, payload_type):
            raise PayloadError(
                f"expected a {payload_type.__name__} payload, got {type(value).__name__}"
            )
    try:
        return json.dumps(converter.unstructure(value), separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"payload of type {type(value).__name__} is not JSON-able: {exc}"
        ) from exc


def decode_payload(data: bytes, payload_type: Any) -> Any:
    """Decode stored bytes into ``payload_type``; raises ``PayloadError`` with
    the cause when the data is not JSON or does not structure as that type."""
    if payload_type is bytes:
        return data
    try:
        raw = json.loads(data)
    except ValueError as exc:
        raise PayloadError(f"payload is not valid JSON: {exc}") from exc
    if payload_type is None or payload_type is Any:
        return raw
    try:
        return converter.structure(raw, payload_type)
    except Exception as exc:  # cattrs raises ClassValidationError and friends
        name = getattr(payload_type, "__name__", repr(payload_type))
        raise PayloadError(f"payload does not structure as {name}: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    notes = getattr(exc, "__notes__", None)
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({'; '.join(notes)})" if notes else text
