"""``postgresql://`` and ``postgres://`` URLs: the libpq connection string,
and the store's own options taken out of the query.

The store's options (every other query option goes to libpq as it is, e.g.
``sslmode``, ``application_name``, ``connect_timeout``):

* ``schema``: the PostgreSQL schema (namespace) the store's tables live in
  (default ``chronos``); stores on different schemas are independent.
* ``poll_only``: ``true`` for a server reached through PgBouncer in
  transaction mode (no ``LISTEN``): idle workers poll every
  ``poll_interval`` instead of waiting for notifications.
* ``poll_interval``: seconds between an idle worker's looks when it cannot
  (or need not) listen (default 1.0 with ``poll_only``; otherwise the
  fallback poll under notifications, default 5.0).
* ``pool_size``: most connections a store opens for its operations
  (default 10; one more for ``LISTEN`` unless ``poll_only``).
* ``migrate``: ``auto`` (default) applies pending migrations at first use
  (under a lock, so many processes starting together apply each once);
  ``off`` only checks that the schema is current and refuses to run
  otherwise (run ``python -m chronos_trio migrate URL``).
* ``statement_timeout``: seconds after which the server cancels one of the
  store's statements (default 30): a hung operation becomes a StoreError.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from .._schemes import redact
from .._url_values import seconds, whole_number

SCHEMES = ("postgresql", "postgres")
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@attrs.frozen
class PostgresOptions:
    """What a URL says: ``conninfo`` for libpq and the store's options."""

    conninfo: str
    schema: str = "chronos"
    poll_only: bool = False
    poll_interval: float | None = None
    pool_size: int = 10
    migrate: str = "auto"
    statement_timeout: float = 30.0

    @property
    def idle_poll(self) -> float:
        """Seconds between an idle worker's looks at the table."""
        if self.poll_interval is not None:
            return self.poll_interval
        return 1.0 if self.poll_only else 5.0


def check_schema_name(schema: str) -> str:
    """``schema`` if it is a plain lower-case identifier, else ValueError."""
    if not _SCHEMA_NAME.match(schema):
        raise ValueError(
            f"schema {schema!r} is not a plain identifier "
            "(lower-case letters, digits and '_', not starting with a digit, at most 63)"
        )
    return schema


def parse_url(url: str) -> PostgresOptions:
    """The options of a ``postgresql://`` (or ``postgres://``) URL.

    Raises ``ValueError`` naming the part that is wrong (the password
    redacted) for another scheme, a bad schema name or a bad option value."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise ValueError(f"not a PostgreSQL URL: {redact(url)!r} (use postgresql://)")
    store: dict[str, str] = {}
    libpq: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _OPTIONS:
            store[name] = value
        else:
            libpq.append((name, value))
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(libpq), ""))
    try:
        return PostgresOptions(
            conninfo=conninfo,
            schema=check_schema_name(store.get("schema", "chronos")),
            poll_only=_flag("poll_only", store.get("poll_only", "false")),
            poll_interval=seconds("poll_interval", store["poll_interval"])
            if "poll_interval" in store
            else None,
            pool_size=whole_number("pool_size", store.get("pool_size", "10"), 1, 1000),
            migrate=_migrate(store.get("migrate", "auto")),
            statement_timeout=seconds("statement_timeout", store.get("statement_timeout", "30")),
        )
    except ValueError as exc:
        raise ValueError(f"{redact(url)}: {exc}") from None


_OPTIONS = frozenset(
    {"schema", "poll_only", "poll_interval", "pool_size", "migrate", "statement_timeout"}
)


def _flag(name: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"{name}={value!r} is not true or false")


def _migrate(value: str) -> str:
    if value.lower() not in ("auto", "off"):
        raise ValueError(f"migrate={value!r} must be auto or off")
    return value.lower()
