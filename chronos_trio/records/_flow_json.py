"""The JSON text of workflow continuations, written and read fast (issue 29:
chain throughput).

Every step of a chain reads its continuation and writes the next one: with
the standard library that was most of the continuer's own time (the text
carries the rest of the chain). orjson writes and reads it many times
faster; where it would differ from ``json`` (integers beyond 64 bits, which
it cannot write and reads as floats; NaN/Infinity, written as null; text it
refuses to read, such as NaN or a lone surrogate escape) the standard
library decides, as it always did, so a continuation means what it meant,
and one written by an older version reads as before (reading is
``records._codec.loads``). Written text is compact (no spaces) and UTF-8
(``json`` escaped non-ASCII characters; both read the same).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from ._codec import loads as codec_loads


def dumps(value: Any) -> str:
    """Compact JSON text of ``value`` (plain data, as :func:`loads` gives);
    NaN and Infinity as ``json`` writes them. Raises TypeError for what is
    not JSON-able."""
    try:
        out = orjson.dumps(value)
    except orjson.JSONEncodeError:
        # integers past 64 bits: the standard library writes them
        return json.dumps(value, separators=(",", ":"))
    nulls = out.count(b"null")
    usual = out.count(b'"p":null') + out.count(b'"after":null') + out.count(b'"f":null')
    if nulls and nulls != usual:
        # A null other than the usual ones (a step that takes its
        # predecessor's result, the end of a flow, no failure callback) may
        # be NaN or Infinity, which orjson writes as null: it then never
        # reads back equal.
        if orjson.loads(out) != value:
            return json.dumps(value, separators=(",", ":"))
    return out.decode()


def orjson_text(value: Any) -> str | None:
    """``value``'s compact JSON text as orjson writes it, None when it cannot
    (an integer past 64 bits). Unchecked: NaN and Infinity come out as null,
    so it serves only to compare with text :func:`dumps` wrote (where they
    are not null, the comparison fails). Never raises for plain data."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return None


def size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (what the stores keep)."""
    return len(text) if text.isascii() else len(text.encode())


def loads(text: str) -> Any:
    """The value of JSON ``text``; raises ValueError when it is not JSON.
    (``records._codec.loads``: orjson, but the standard library for what
    orjson refuses or would read differently: NaN, Infinity, a lone
    surrogate escape, an integer beyond 64 bits.)"""
    return codec_loads(text.encode("utf-8", "surrogatepass"))
