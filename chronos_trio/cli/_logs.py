"""Log set-up for the command line: text or JSON lines, one line per event.

The runtime logs through ``logging.getLogger("chronos_trio.*")`` with
messages of the form ``"<event> key=value key=value ..."``, for example
``succeeded job=3f2a kind=email.send queue=default attempt=1`` (debug) or
``retry job=... attempt=2 in=0.50s error=ConnectionError: ...`` (info).
Library code never configures logging; only the CLI (or the embedding
program) does, through :func:`configure_logging`.

* ``text``: ``2025-01-31T12:00:00.123Z INFO  chronos_trio.worker [host:pid:0]
  succeeded job=3f2a ...`` -- the message is already key=value.
* ``json``: one JSON object per line. The message is split into ``event``
  and its ``key=value`` fields (integers become numbers; a value runs up to
  the next `` key=``, so ``error=`` keeps its spaces), next to ``ts``,
  ``level``, ``logger``, ``process`` (the worker id or ``manager``), the
  full ``msg``, any ``extra=`` fields, and ``exc`` with a traceback.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import logging
import re
import sys
from typing import Any, TextIO

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

#: ``key=`` at the start of the message, after whitespace, or opening a repr.
_KEY = re.compile(r"(?:(?<=[\s(])|^)([A-Za-z_][\w.-]*)=")
_INT = re.compile(r"-?\d+")
#: Attributes every LogRecord has; anything else came in through ``extra=``.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "process_label"}
#: Field names the JSON line uses itself; a message key that collides gets a ``field_`` prefix.
_RESERVED = frozenset({"ts", "level", "logger", "process", "event", "msg", "exc"})


def split_message(message: str) -> tuple[str, dict[str, Any]]:
    """``"retry job=ab attempt=2 error=Boom: x y"`` -> ``("retry", {"job": "ab",
    "attempt": 2, "error": "Boom: x y"})``. Text without ``key=`` is all event.

    An attrs-style repr at the end (``stopped: Stats(a=1, b=2)``) gives its
    fields too; a value that is a list of strings (``['first line']``) is
    joined with newlines; integers become numbers."""
    matches = list(_KEY.finditer(message))
    if not matches:
        return message.strip(), {}
    event = message[: matches[0].start()].strip()
    in_repr = _REPR_OPEN.search(event)
    if in_repr:
        event = event[: in_repr.start()]
    fields: dict[str, Any] = {}
    for i, match in enumerate(matches):
        last = i + 1 == len(matches)
        end = len(message) if last else matches[i + 1].start()
        value = message[match.end() : end].strip()
        if in_repr:
            value = value.removesuffix(")") if last else value.removesuffix(",")
            if len(value) >= 2 and value[0] == value[-1] == "'":
                value = value[1:-1]
        fields[match.group(1)] = _value(value)
    return event.rstrip(":").strip(), fields


_REPR_OPEN = re.compile(r"\s*[A-Za-z_]\w*\($")


def _value(text: str) -> Any:
    if _INT.fullmatch(text):
        return int(text)
    if text[:2] in ("['", '["') and text[-2:] in ("']", '"]'):
        try:
            items = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        if isinstance(items, list) and all(isinstance(x, str) for x in items):
            return "\n".join(items)
    return text


def _timestamp(record: logging.LogRecord) -> str:
    when = dt.datetime.fromtimestamp(record.created, dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


class TextFormatter(logging.Formatter):
    """``<ts> <LEVEL> <logger> [<process>] <message>``, tracebacks indented below."""

    def format(self, record: logging.LogRecord) -> str:
        label = getattr(record, "process_label", "")
        line = (
            f"{_timestamp(record)} {record.levelname:<7} {record.name}"
            f"{f' [{label}]' if label else ''} {record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        event, fields = split_message(message)
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        label = getattr(record, "process_label", "")
        if label:
            out["process"] = label
        out["event"] = event
        for key, value in fields.items():
            out[f"field_{key}" if key in _RESERVED else key] = value
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in out:
                out[key] = value
        out["msg"] = message
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _ProcessLabel(logging.Filter):
    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def filter(self, record: logging.LogRecord) -> bool:
        record.process_label = self.label
        return True


def configure_logging(
    level: str = "info",
    fmt: str = "text",
    *,
    label: str = "",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send ``chronos_trio`` (and the root logger's) records at ``level`` and
    above to ``stream`` (stderr) as ``fmt`` lines, tagged with ``label`` (the
    worker id of a process, or ``manager``). Replaces handlers a previous
    call installed, so calling it again (e.g. once the worker id is known)
    is safe. Returns the handler."""
    if level.lower() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; expected one of: {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(_ProcessLabel(label))
    handler.set_name("chronos_trio.cli")
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == "chronos_trio.cli":
            root.removeHandler(old)
    root.addHandler(handler)
    # Our loggers follow the flag; third-party libraries stay at WARNING so
    # "--log-level debug" is about jobs, not every socket read.
    root.setLevel(logging.WARNING)
    logging.getLogger("chronos_trio").setLevel(level.upper())
    return handler


__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "TextFormatter", "configure_logging"]
