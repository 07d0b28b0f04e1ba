"""Log events whose fields travel as data.

Every library log call that carries values goes through :func:`log_event`:
the record gets the event name (``record.chronos_event``) and its fields
(``record.chronos_fields``, a dict of the values as given), so a formatter
reads them as data (the CLI's JSON lines do) and never parses the text. The
message is the readable form of the same thing, ``event key=value ...``,
built only when the logger is enabled for the level. A value is quoted
(JSON string syntax) when it is empty or holds a space, ``=``, a quote, a
backslash or a control character, so no value can pose as another field or
start a line of its own: ``error="upstream said status=500 queue=evil"``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._jobs import Job

#: The LogRecord attribute holding the event name.
EVENT_ATTR = "chronos_event"
#: The LogRecord attribute holding the event's fields (``{name: value}``).
FIELDS_ATTR = "chronos_fields"

#: Line breaks and controls ``json.dumps(ensure_ascii=False)`` leaves as they are.
_STILL_RAW = re.compile(r"[\x7f-\x9f\u2028\u2029]")


def text_value(value: object) -> str:
    """``value`` as it appears after ``key=`` in the text form."""
    text = value if isinstance(value, str) else str(value)
    # isprintable() is False for every control, line break and space but " "
    if (
        text.isprintable()
        and text
        and " " not in text
        and "=" not in text
        and '"' not in text
        and "\\" not in text
    ):
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    return _STILL_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", quoted)


def event_text(event: str, fields: Mapping[str, object]) -> str:
    """``event key=value ...``: the message of a :func:`log_event` record."""
    if not fields:
        return event
    return event + " " + " ".join(f"{key}={text_value(value)}" for key, value in fields.items())


def log_event(
    logger: logging.Logger,
    level: int,
    event: str,
    /,
    *,
    exc_info: bool | BaseException = False,
    **fields: object,
) -> None:
    """Log ``event`` at ``level`` on ``logger`` with ``fields`` as data
    (see the module docstring). ``exc_info`` adds a traceback: ``True`` for
    the exception being handled, or an exception. Costs one level check
    when the level is off. A value that is not a string is shown with
    ``str`` in the text and kept as it is in the fields."""
    if not logger.isEnabledFor(level):
        return
    logger.log(
        level,
        event_text(event, fields),
        exc_info=exc_info,
        extra={EVENT_ATTR: event, FIELDS_ATTR: fields},
        stacklevel=2,
    )


__all__ = ["EVENT_ATTR", "FIELDS_ATTR", "event_text", "log_event", "text_value"]


def log_job_event(
    logger: logging.Logger,
    level: int,
    event: str,
    job: Job,
    /,
    *,
    exc_info: bool | BaseException = False,
    **fields: object,
) -> None:
    """:func:`log_event` about one job: its ID, kind, queue and attempt
    come first among the fields, then ``fields``. Costs one level check
    when the level is off (the fields are built only when it is on)."""
    if not logger.isEnabledFor(level):
        return
    log_event(
        logger,
        level,
        event,
        exc_info=exc_info,
        job=job.id,
        kind=job.kind,
        queue=job.queue,
        attempt=job.attempts,
        **fields,
    )
