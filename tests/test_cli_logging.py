"""Log set-up for the CLI: key=value messages become JSON fields."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from chronos_trio.cli._logs import JsonFormatter, TextFormatter, configure_logging, split_message


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    ours = logging.getLogger("chronos_trio")
    handlers, level, our_level = list(root.handlers), root.level, ours.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    ours.setLevel(our_level)


def record(
    msg: str, *args: object, level: int = logging.INFO, **extra: object
) -> logging.LogRecord:
    rec = logging.LogRecord("chronos_trio.worker", level, __file__, 1, msg, args, None)
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_split_message_into_event_and_fields() -> None:
    assert split_message("succeeded job=ab12 kind=email.send queue=default attempt=1") == (
        "succeeded",
        {"job": "ab12", "kind": "email.send", "queue": "default", "attempt": 1},
    )
    event, fields = split_message(
        "retry job=x kind=k queue=q attempt=2 in=0.50s error=ConnectionError: a b=c"
    )
    assert event == "retry" and fields["in"] == "0.50s" and fields["attempt"] == 2
    # A value runs to the next " key="; "=" inside a value does not split it.
    assert fields["error"] == "ConnectionError: a" and fields["b"] == "c"
    assert split_message("worker w starting: queues=critical=6,default=3 concurrency=16") == (
        "worker w starting",
        {"queues": "critical=6,default=3", "concurrency": 16},
    )
    assert split_message("all worker processes stopped") == ("all worker processes stopped", {})
    # The runtime's "dead ... error=%s" passes a one-item list; a stats repr ends a line.
    assert split_message("dead job=j error=['KeyError: 1']")[1]["error"] == "KeyError: 1"
    assert split_message("w stopped: Stats(worker_id='h:1:0', leased=2, restarts={})") == (
        "w stopped",
        {"worker_id": "h:1:0", "leased": 2, "restarts": "{}"},
    )


def test_json_lines_carry_the_runtime_fields() -> None:
    fmt = JsonFormatter()
    rec = record(
        "dead job=%s kind=%s queue=%s attempts=%d error=%s",
        "j1",
        "image.resize",
        "default",
        3,
        "OSError: corrupt",
        level=logging.WARNING,
        process_label="host:1:0",
        tenant="acme",
    )
    line = json.loads(fmt.format(rec))
    assert line["level"] == "warning" and line["logger"] == "chronos_trio.worker"
    assert line["event"] == "dead" and line["job"] == "j1" and line["attempts"] == 3
    assert line["error"] == "OSError: corrupt" and line["process"] == "host:1:0"
    assert line["tenant"] == "acme", "extra= fields are kept"
    assert line["ts"].endswith("Z") and line["msg"].startswith("dead job=j1")
    clash = json.loads(fmt.format(record("odd level=3 msg=x")))
    assert clash["level"] == "info" and clash["field_level"] == 3 and clash["field_msg"] == "x"


def test_json_lines_include_tracebacks() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord("chronos_trio", logging.ERROR, __file__, 1, "crashed", (), None)
        import sys

        rec.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(rec))
    assert "ValueError: boom" in line["exc"] and "\n" not in JsonFormatter().format(rec)


def test_text_lines() -> None:
    rec = record("succeeded job=%s", "j1", process_label="manager")
    text = TextFormatter().format(rec)
    assert text.endswith("INFO    chronos_trio.worker [manager] succeeded job=j1")


@pytest.mark.usefixtures("restore_logging")
def test_configure_logging_levels_and_replacement() -> None:
    out = io.StringIO()
    configure_logging("debug", "json", label="w:1:0", stream=out)
    configure_logging("info", "json", label="w:1:0", stream=out)  # replaces, no duplicates
    logging.getLogger("chronos_trio.worker").debug("leased job=a")
    logging.getLogger("chronos_trio.worker").info("retry job=a attempt=2")
    logging.getLogger("some.library").info("chatter")
    logging.getLogger("some.library").warning("careful")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["retry", "careful"]
    assert lines[0]["process"] == "w:1:0"
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud")
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("info", "xml")
