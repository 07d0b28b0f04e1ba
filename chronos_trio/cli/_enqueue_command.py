"""``python -m chronos_trio enqueue KIND PAYLOAD``: enqueue one job from the
shell (Celery's ``celery call``), through the :class:`SyncProducer`, the
same path a Django view takes.

* With ``--app``, ``KIND`` must be one of the app's tasks and ``PAYLOAD``
  (JSON) is structured to the task's payload type first: a payload that
  does not structure is a usage error naming the field (exit 2) and nothing
  is enqueued. The task's queue, retries and timeout are the defaults.
* Without it, the JSON value is enqueued as it is to ``KIND`` (queue
  ``default`` unless ``--queue``). A worker whose app has that task
  structures it when it runs the job: one that does not structure is dead
  at once, with the reason as its last error (``job ID`` shows it).

Prints the job ID (``--json``: one object with the job's ID, kind, queue,
whether it was created and when it runs, and, with ``--wait``, its
result). ``--wait`` enqueues the job marked as waited on
(``keep_outcome``: its outcome stays readable even when it ends before the
wait begins), then waits for the outcome (Redis wakes the
waiter; on PostgreSQL and SQLite it polls) and prints the result as JSON
(``null`` for a task that keeps none): exit 12 (``EXIT_JOB_FAILED``) when
the job ended dead or aborted, its last error on stderr; 13
(``EXIT_TIMEOUT``) when it had not finished within ``--timeout`` (the job
goes on).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any

from ..app._app import App
from ..records._codec import decode_payload, encode_payload, loads
from ..records._errors import (
    JobAborted,
    JobFailed,
    JobNotFound,
    PayloadError,
    ResultExpired,
    ResultTimeout,
    StoreError,
)
from ._loading import load_app, url_from
from ._options import (
    EXIT_BAD_URL,
    EXIT_FAILURE,
    EXIT_JOB_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    CliError,
    one_line,
    seconds,
)


def _run_at(text: str) -> dt.datetime:
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time with a timezone, e.g. 2026-12-03T10:00:00Z, got {text!r}"
        )
    return at


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", metavar="KIND", help="the task's kind, e.g. email.send")
    parser.add_argument(
        "payload", metavar="PAYLOAD", help="the payload as JSON ('-': read it from stdin)"
    )
    parser.add_argument(
        "--app",
        metavar="APP",
        help="module:attribute of the App: KIND must be its task, PAYLOAD is checked "
        "against the task's payload type",
    )
    parser.add_argument("--url", help="store URL (default: $CHRONOS_URL, else the app's)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--delay", metavar="S", type=seconds(allow_zero=True), help="run S seconds from now"
    )
    when.add_argument("--run-at", metavar="ISO", type=_run_at, help="run at this time")
    parser.add_argument("--queue", metavar="Q", help="queue (default: the task's, else default)")
    parser.add_argument("--job-id", metavar="ID", help="job id (idempotent: an existing one wins)")
    parser.add_argument(
        "--wait", action="store_true", help="wait for the outcome and print the result as JSON"
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=seconds(),
        help="with --wait: give up waiting after S seconds (exit 13; default: no limit)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: job_id, kind, queue, created, run_at (with --wait: "
        "and result)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..producers.sync import SyncProducer  # only this command needs it

    if args.timeout is not None and not args.wait:
        raise CliError("--timeout is for --wait", EXIT_USAGE)
    text = sys.stdin.read() if args.payload == "-" else args.payload
    app = load_app(args.app) if args.app is not None else None
    payload = _payload(app, args.kind, text.encode())
    url = url_from(args.url)
    if url is None and app is None:
        raise CliError("no store given: pass --app or --url, or set $CHRONOS_URL", EXIT_USAGE)
    options: dict[str, Any] = {
        name: value
        for name, value in (
            ("delay", args.delay),
            ("run_at", args.run_at),
            ("queue", args.queue),
            ("job_id", args.job_id),
        )
        if value is not None
    }
    if args.wait:
        # stored marked as waited on: a worker that finishes the job between
        # the enqueue and the wait leaves its outcome readable (a task that
        # keeps no result would otherwise be gone: not found)
        options["keep_outcome"] = True
    try:
        producer = SyncProducer(url, app=app)
    except ValueError as exc:
        raise CliError(one_line(str(exc)), EXIT_BAD_URL) from None
    try:
        try:
            handle = producer.enqueue(args.kind, payload, **options)
        except (ValueError, PayloadError) as exc:
            raise CliError(f"nothing enqueued: {one_line(str(exc))}", EXIT_USAGE) from None
        if not args.json:
            print(handle.job_id, flush=True)
        result = _wait(handle, args.timeout) if args.wait else None
        if args.json:
            fields = {
                "job_id": handle.job_id,
                "kind": handle.kind,
                "queue": handle.queue,
                "created": handle.created,
                "run_at": handle.run_at,
            }
            if args.wait:
                fields["result"] = None if result is None else _json_value(result)
            print(json.dumps(fields, ensure_ascii=False))
        elif result is not None:
            sys.stdout.buffer.write(result + b"\n")
            sys.stdout.flush()
        return EXIT_OK
    except StoreError as exc:
        raise CliError(f"store error: {one_line(str(exc))}", EXIT_UNAVAILABLE) from None
    finally:
        producer.close()


def _payload(app: App | None, kind: str, data: bytes, *, nothing: str = "nothing enqueued") -> Any:
    """The payload to enqueue: structured to the task's payload type with an
    app (a usage error naming what does not fit, after ``nothing``: what
    did not happen), else the JSON value."""
    if app is None:
        try:
            return loads(data)
        except ValueError as exc:
            raise CliError(f"PAYLOAD is not valid JSON: {one_line(str(exc))}", EXIT_USAGE) from None
    spec = app.registry.tasks.get(kind)
    if spec is None:
        known = ", ".join(sorted(app.registry.tasks)) or "none"
        raise CliError(f"the app has no task {kind!r} (its tasks: {known})", EXIT_USAGE)
    try:
        return decode_payload(data, spec.payload_type)
    except PayloadError as exc:
        raise CliError(f"{nothing}: {one_line(str(exc))}", EXIT_USAGE) from None


def _wait(handle: Any, timeout: float | None) -> bytes | None:
    """Wait for ``handle``'s outcome; its result as JSON (None: it succeeded
    but its result is gone). A job that failed or did not finish in time is
    a :class:`CliError` with its exit code."""
    try:
        value = handle.result(timeout)
    except (JobFailed, JobAborted) as exc:  # "job ID failed after N attempt(s): error"
        raise CliError(one_line(str(exc)), EXIT_JOB_FAILED) from None
    except ResultTimeout as exc:
        raise CliError(str(exc), EXIT_TIMEOUT) from None
    except ResultExpired as exc:  # it succeeded; its result is gone
        print(f"note: {one_line(str(exc))}", file=sys.stderr)
        return None
    except JobNotFound as exc:
        raise CliError(one_line(str(exc)), EXIT_NOT_FOUND) from None
    except PayloadError as exc:  # a stored result that does not decode as the task's type
        raise CliError(one_line(str(exc)), EXIT_FAILURE) from None
    try:
        return encode_payload(value, Any, what="result")
    except PayloadError:  # not JSON-able after all: say what it is
        return repr(value).encode()


def _json_value(data: bytes) -> Any:
    """A result for ``--json``: its JSON value, else (raw bytes) its text."""
    try:
        return loads(data)
    except ValueError:
        return data.decode(errors="replace")


__all__ = ["add_arguments", "run"]
