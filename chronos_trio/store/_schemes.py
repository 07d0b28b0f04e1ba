"""Store URL schemes, in one registry: which backend opens which URL, and
whether the store it opens can be shared by several processes.

Backends are imported on first use (``memory://`` never imports redis-py).
Another backend registers its schemes with :func:`register_scheme`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import cast

import attrs

from ..records._attrs_methods import fields_eq, fields_hash, fields_repr
from ._roles import Store
from ._transactional import ProducerEnqueue

#: What ``open_store`` passes a backend: the whole URL.
Opener = Callable[[str], Store]
#: The same for ``open_producer_store``.
ProducerOpener = Callable[[str], ProducerEnqueue]


@attrs.frozen
class Scheme:
    """A URL scheme: ``opener`` is ``"module:function"`` taking the URL;
    ``shared`` says whether its stores can serve several processes;
    ``producer_opener`` (``"module:function"``, or empty) opens what a
    producer outside Trio uses for it, a :class:`ProducerEnqueue` from
    modules that import no Trio (the SQL stores; a Redis producer speaks
    Redis itself)."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    name: str
    opener: str
    shared: bool
    description: str = ""
    producer_opener: str = ""


_SCHEMES: dict[str, Scheme] = {}


def register_scheme(
    name: str, opener: str, *, shared: bool, description: str = "", producer_opener: str = ""
) -> None:
    """Make ``open_store`` hand ``name://...`` URLs to ``opener``
    (``"package.module:function"``, imported on first use), and
    ``open_producer_store`` to ``producer_opener`` if one is given."""
    for what in (opener, producer_opener) if producer_opener else (opener,):
        module, sep, function = what.partition(":")
        if not sep or not module or not function:
            raise ValueError(f"opener must be 'module:function', got {what!r}")
    _SCHEMES[name.lower()] = Scheme(name.lower(), opener, shared, description, producer_opener)


def schemes() -> tuple[Scheme, ...]:
    """Every registered scheme, in registration order."""
    return tuple(_SCHEMES.values())


def scheme_names(*, shared: bool | None = None) -> tuple[str, ...]:
    """Registered scheme names (only those whose ``shared`` matches, if given)."""
    return tuple(s.name for s in _SCHEMES.values() if shared is None or s.shared == shared)


def scheme_of(url: str | None) -> Scheme:
    """The scheme of ``url`` (None or ``memory`` is the in-memory store).
    ``ValueError`` naming the accepted forms for anything else."""
    if url is None or url.strip().lower() == "memory":
        return _SCHEMES["memory"]
    name = url.partition("://")[0].lower() if "://" in url else ""
    scheme = _SCHEMES.get(name)
    if scheme is None:
        accepted = ", ".join(f"{s}://" for s in _SCHEMES)
        raise ValueError(f"unsupported store URL {redact(url)!r}: use one of {accepted}")
    return scheme


def open_store(url: str | None) -> Store:
    """A new store for ``url`` (None: a MemoryStore). ``ValueError`` for an
    unknown scheme or a malformed URL; ``ImportError`` when the backend's
    library is missing. Nothing connects yet: stores connect on first use."""
    scheme = scheme_of(url)
    module, _, function = scheme.opener.partition(":")
    opener = cast(Opener, getattr(importlib.import_module(module), function))
    return opener(url or "memory://")


def open_producer_store(url: str) -> ProducerEnqueue | None:
    """What a producer outside Trio uses for ``url``: the scheme's
    :class:`ProducerEnqueue` (imported without Trio), or None for a scheme
    that has none (Redis, memory). ``ValueError`` for an unknown scheme or
    a malformed URL. Nothing connects yet."""
    scheme = scheme_of(url)
    if not scheme.producer_opener:
        return None
    module, _, function = scheme.producer_opener.partition(":")
    opener = cast(ProducerOpener, getattr(importlib.import_module(module), function))
    return opener(url)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for messages and logs):
    the userinfo's, and the value of any query option whose name contains
    "password" (``sentinel_password``)."""
    url = _QUERY_PASSWORD.sub(r"\1***", url)
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}{sep}{user}{colon}{'***' if colon else ''}@{hosts}"


_QUERY_PASSWORD = re.compile(r"([?&][^=&#]*password[^=&#]*=)[^&#]*", re.IGNORECASE)


register_scheme(
    "memory",
    "chronos_trio.store.memory:open_memory_store",
    shared=False,
    description="this process's memory (tests, embedded use)",
)
for _name, _what in (
    ("redis", "Redis"),
    ("rediss", "Redis over TLS"),
    ("unix", "Redis on a Unix socket"),
    ("redis+cluster", "Redis Cluster"),
    ("rediss+cluster", "Redis Cluster over TLS"),
    ("redis+sentinel", "Redis Sentinel (the master of a service)"),
    ("rediss+sentinel", "Redis Sentinel over TLS"),
):
    register_scheme(_name, "chronos_trio.store.redis:open_store", shared=True, description=_what)
for _name in ("postgresql", "postgres"):
    register_scheme(
        _name,
        "chronos_trio.store.postgres:open_postgres_store",
        shared=True,
        description="PostgreSQL (the postgres extra)",
        producer_opener="chronos_trio.store.postgres:open_postgres_producer_store",
    )
register_scheme(
    "sqlite",
    "chronos_trio.store.sqlite:open_sqlite_store",
    shared=True,
    description="a SQLite file (one host, no server)",
    producer_opener="chronos_trio.store.sqlite:open_sqlite_producer_store",
)
