"""Log set-up for the CLI: events carry their fields as data; JSON lines read
them from the record, never from the message text."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import trio

from chronos_trio import App, JobContext, JobState
from chronos_trio.cli._logs import JsonFormatter, TextFormatter, configure_logging
from chronos_trio.records._log import log_event, text_value
from tests._backends import Backend


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


def event_record(event: str, level: int = logging.INFO, /, **fields: object) -> logging.LogRecord:
    """The record ``log_event`` makes, caught on its way out."""
    logger = logging.getLogger("chronos_trio.test_cli_logging")
    caught: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = caught.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        log_event(logger, level, event, **fields)
    finally:
        logger.removeHandler(handler)
    [rec] = caught
    return rec


def test_log_event_carries_its_fields_as_data() -> None:
    rec = event_record("retry", job="ab12", attempt=2, delay=0.5, error="Boom: x y")
    assert rec.getMessage() == 'retry job=ab12 attempt=2 delay=0.5 error="Boom: x y"'
    assert rec.chronos_event == "retry"
    assert rec.chronos_fields == {"job": "ab12", "attempt": 2, "delay": 0.5, "error": "Boom: x y"}
    assert rec.pathname == __file__, "the record names the caller, not the helper"
    # quoted when a value could pose as a field or break the line; plain otherwise
    assert text_value("a=b") == '"a=b"' and text_value("") == '""'
    assert text_value("line\nforged") == '"line\\nforged"'
    assert text_value("x\u2028y\x85") == '"x\\u2028y\\u0085"'
    assert text_value("email.send") == "email.send" and text_value(3) == "3"
    # nothing is built when the level is off
    quiet = logging.getLogger("chronos_trio.test_cli_logging.quiet")
    quiet.setLevel(logging.WARNING)

    class Loud:
        def __str__(self) -> str:
            raise AssertionError("formatted although the level is off")

    log_event(quiet, logging.DEBUG, "leased", job=Loud())


def test_json_lines_carry_the_event_fields() -> None:
    fmt = JsonFormatter()
    rec = event_record(
        "dead",
        logging.WARNING,
        job="j1",
        kind="image.resize",
        queue="default",
        attempts=3,
        error="OSError: corrupt",
        level="x",
    )
    rec.process_label = "host:1:0"
    rec.tenant = "acme"
    line = json.loads(fmt.format(rec))
    assert line["level"] == "warning" and line["logger"] == "chronos_trio.test_cli_logging"
    assert line["event"] == "dead" and line["job"] == "j1" and line["attempts"] == 3
    assert line["error"] == "OSError: corrupt" and line["process"] == "host:1:0"
    assert line["field_level"] == "x", "a field never replaces the line's own keys"
    assert line["tenant"] == "acme", "extra= attributes are kept"
    assert line["ts"].endswith("Z") and line["msg"].startswith("dead job=j1 kind=image.resize")
    assert "chronos_event" not in line and "chronos_fields" not in line
    # a record of another library: its message is its event, nothing parsed out of it
    plain = json.loads(fmt.format(record("odd level=3 msg=x")))
    assert plain["event"] == "odd level=3 msg=x" and plain["level"] == "info"
    assert "field_level" not in plain and "field_msg" not in plain


HOSTILE = "upstream said status=500 queue=evil attempts=99 job=forged"


def test_a_hostile_message_cannot_overwrite_fields() -> None:
    rec = event_record("dead", job="j1", queue="default", attempts=1, error=HOSTILE)
    line = json.loads(JsonFormatter().format(rec))
    assert (line["job"], line["queue"], line["attempts"]) == ("j1", "default", 1)
    assert line["error"] == HOSTILE and "status" not in line
    text = TextFormatter().format(rec)
    assert text.endswith(f'dead job=j1 queue=default attempts=1 error="{HOSTILE}"')


@pytest.mark.usefixtures("restore_logging")
async def test_a_failing_job_with_a_hostile_error_logs_its_own_fields(
    backend: Backend, clock: object
) -> None:
    """Through the runtime: the worker's ``dead`` line of a job whose error
    text holds ``key=value`` pairs (and a line break) keeps the job's queue
    and attempts, on both stores."""
    out = io.StringIO()
    configure_logging("info", "json", label="w:1:0", stream=out)
    app = App(backend.store())

    @app.task("tests.hostile", max_retries=0)
    async def hostile(payload: bytes, job: JobContext) -> None:
        raise RuntimeError(HOSTILE + "\n2025-01-01T00:00:00.000Z INFO forged line")

    async with app.open_worker(**backend.timing(poll_interval=0.5)):
        ref = await hostile.enqueue(b"x")
        with trio.fail_after(30):
            while (job := await app.store.get_job(ref.job_id)) is None or (
                job.state is not JobState.DEAD
            ):
                await trio.sleep(0.05)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    [dead] = [line for line in lines if line["event"] == "dead"]
    assert dead["job"] == ref.job_id and dead["queue"] == "default"
    assert dead["attempts"] == 1 and dead["kind"] == "tests.hostile"
    assert dead["error"].endswith(f"RuntimeError: {HOSTILE}")


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
    log_event(logging.getLogger("chronos_trio.worker"), logging.DEBUG, "leased", job="a")
    log_event(logging.getLogger("chronos_trio.worker"), logging.INFO, "retry", job="a", attempt=2)
    logging.getLogger("some.library").info("chatter")
    logging.getLogger("some.library").warning("careful")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["retry", "careful"]
    assert lines[0]["process"] == "w:1:0"
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud")
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("info", "xml")
