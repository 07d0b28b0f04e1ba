"""``sqlite://`` URLs: the database file and the store's options.

The path follows SQLAlchemy's form: ``sqlite:///jobs.db`` is ``jobs.db``
relative to the working directory, ``sqlite:////var/lib/app/jobs.db`` (four
slashes) the absolute ``/var/lib/app/jobs.db``. A ``~`` is expanded. An
in-memory database (``:memory:``) is refused: its connections do not share
it (use ``memory://`` for a store in this process's memory).

Options (query parameters):

* ``wake_interval``: seconds between an idle process's looks at whether
  another process changed the file (``PRAGMA data_version``, one cheap read;
  default 0.02), five times that once the file has been quiet for a second.
  A write of the same process wakes its waiters at once.
* ``idle_poll``: seconds after which an idle worker looks at the table even
  without a sign of change (default 5).
* ``busy_timeout``: seconds a write waits for another process's write
  transaction before it fails with StoreError (default 30).
* ``synchronous``: ``normal`` (default) or ``full``. Under ``normal`` (WAL's
  usual mode) a commit is written to the log but not synced: a crash or
  kill -9 of any process loses nothing, a power cut or a kernel crash may
  take the last commits (the file stays consistent), as Redis's default
  ``appendfsync everysec`` may. Under ``full`` a commit returns once the log
  is on the disk (each write transaction waits for an fsync).
* ``readers``: most reader connections a store opens beside its one writer
  (default 4).
"""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs

from .._url_values import seconds, whole_number

SCHEME = "sqlite"


@attrs.frozen
class SqliteOptions:
    """What a URL says: the file's path and the store's options."""

    path: str
    wake_interval: float = 0.02
    idle_poll: float = 5.0
    busy_timeout: float = 30.0
    synchronous: str = "normal"
    readers: int = 4


def parse_url(url: str) -> SqliteOptions:
    """The options of a ``sqlite:///path`` URL. Raises ``ValueError`` naming
    what is wrong: another scheme, no path, ``:memory:``, an unknown option
    or a bad value."""
    parts = urlsplit(url)
    if parts.scheme.lower() != SCHEME:
        raise ValueError(f"not a SQLite URL: {url!r} (use sqlite:///path/to/jobs.db)")
    if parts.netloc:
        raise ValueError(
            f"{url!r}: a SQLite URL names a local file, not a host: "
            "sqlite:///relative/jobs.db or sqlite:////absolute/jobs.db"
        )
    raw = unquote(parts.path)
    path = raw[1:] if raw.startswith("/") else raw
    if not path:
        raise ValueError(f"{url!r}: no database file (use sqlite:///path/to/jobs.db)")
    if path == ":memory:" or path.startswith("file::memory:"):
        raise ValueError(
            f"{url!r}: an in-memory SQLite database is not shared by connections; "
            "use memory:// for a store in this process's memory"
        )
    given = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(given) - _OPTIONS)
    if unknown:
        raise ValueError(
            f"{url!r}: unknown option(s) {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_OPTIONS))})"
        )
    try:
        return SqliteOptions(
            path=os.path.expanduser(path),
            wake_interval=seconds("wake_interval", given.get("wake_interval", "0.02")),
            idle_poll=seconds("idle_poll", given.get("idle_poll", "5")),
            busy_timeout=seconds("busy_timeout", given.get("busy_timeout", "30")),
            synchronous=_synchronous(given.get("synchronous", "normal")),
            readers=whole_number("readers", given.get("readers", "4"), 1, 64),
        )
    except ValueError as exc:
        raise ValueError(f"{url!r}: {exc}") from None


_OPTIONS = frozenset({"wake_interval", "idle_poll", "busy_timeout", "synchronous", "readers"})


def _synchronous(value: str) -> str:
    if value.lower() not in ("full", "normal"):
        raise ValueError(f"synchronous={value!r} must be full or normal")
    return value.lower()
