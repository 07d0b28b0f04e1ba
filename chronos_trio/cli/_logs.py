"""Log set-up for the command line: text or JSON lines, one line per event.

The runtime logs through ``logging.getLogger("chronos_trio.*")``, each event
with :func:`~chronos_trio.records._log.log_event`: the record carries the
event name and its fields as data (``record.chronos_event``,
``record.chronos_fields``), and its message is their readable form,
``succeeded job=3f2a kind=email.send queue=default attempt=1`` (debug) or
``retry job=... attempt=2 delay=0.5 error="ConnectionError: ..."`` (info).
Library code never configures logging; only the CLI (or the embedding
program) does, through :func:`configure_logging`.

* ``text``: ``2025-01-31T12:00:00.123Z INFO  chronos_trio.worker [host:pid:0]
  succeeded job=3f2a ...``: the message as it is.
* ``json``: one JSON object per line: ``ts``, ``level``, ``logger``,
  ``process`` (the worker id or ``manager``), ``event``, the event's fields
  with their values as logged (numbers stay numbers), any other ``extra=``
  attributes, the full ``msg``, and ``exc`` with a traceback. The fields
  are read from the record, never parsed out of the message, so a value
  (an error text, say) cannot add or overwrite a field. A record logged
  without fields (another library's) has its message as its ``event``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

from ..records._log import EVENT_ATTR, FIELDS_ATTR

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")

#: Attributes every LogRecord has; anything else came in through ``extra=``.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {
    "message",
    "asctime",
    "process_label",
    "taskName",
    EVENT_ATTR,
    FIELDS_ATTR,
}
#: Names the JSON line uses itself; a field that has one gets a ``field_`` prefix.
_RESERVED = frozenset({"ts", "level", "logger", "process", "event", "msg", "exc"})


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
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        label = getattr(record, "process_label", "")
        if label:
            out["process"] = label
        event = getattr(record, EVENT_ATTR, None)
        out["event"] = event if isinstance(event, str) else message
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                out[f"field_{key}" if key in _RESERVED else key] = value
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in out:
                out[f"field_{key}" if key in _RESERVED else key] = value
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
