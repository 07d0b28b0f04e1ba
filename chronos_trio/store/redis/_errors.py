"""redis-py's exceptions, without importing redis-py before one is needed.

The native path (``_native``) fails and reports error replies with
redis-py's exception classes, as redis-py itself would. Importing redis-py
costs more than the rest of a worker's start-up past Trio (``import redis``
loads its asyncio client, and asyncio with it), and a worker on a plain
``redis://`` URL never needs redis-py otherwise, so it is imported the first
time one of its exceptions is made: a failure, or an error reply.

Guarantees:

* :func:`caught` is what ``except`` clauses name: redis-py's base classes
  once redis-py is imported, else nothing, which is right because no
  redis-py exception can exist yet; it imports nothing;
* an error reply becomes the exception redis-py's parser makes of it
  (:func:`reply_error`), except ``NOSCRIPT`` on the native path, which is a
  :class:`NoScript` until the adapter has loaded the script and sent the op
  again (a fresh server's first leases need no redis-py); one still missing
  then becomes redis-py's ``NoScriptError``.
"""

from __future__ import annotations

import re
import sys
from types import ModuleType
from typing import Any


def exceptions() -> ModuleType:
    """``redis.exceptions``, importing redis-py if it is not imported yet."""
    import redis.exceptions

    return redis.exceptions


def caught() -> tuple[type[BaseException], ...]:
    """The redis-py errors an ``except`` clause maps to StoreError (nothing
    while redis-py is not imported); imports nothing."""
    module = sys.modules.get("redis.exceptions")
    if module is None:
        return ()
    return (module.RedisError, module.RedisClusterException)


def reply_error(text: str) -> Exception:
    """The redis-py exception for the error reply ``text`` (``"ERR ..."``),
    exactly as redis-py's parser makes it."""
    from redis._parsers.base import BaseParser

    error: Exception = BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    return error


class NoScript(Exception):
    """A ``NOSCRIPT`` error reply on the native path, before the adapter
    loaded the script and sent the op again (see the module doc). Its
    message is the whole reply."""


def is_noscript(reply: Any) -> bool:
    """Whether ``reply`` is a NOSCRIPT error reply (either path's)."""
    if type(reply) is NoScript:
        return True
    module = sys.modules.get("redis.exceptions")
    return module is not None and isinstance(reply, module.NoScriptError)


def settled(reply: Any) -> Any:
    """``reply``, with a :class:`NoScript` made redis-py's ``NoScriptError``."""
    return reply_error(str(reply)) if type(reply) is NoScript else reply


_CLIENT_REPR = re.compile(r"<redis\.client\.Redis\(.*?host=([^,]+),port=(\d+).*?\)>\)>\)>")


def describe(exc: BaseException) -> str:
    """``exc``'s message, with redis-py's long client reprs in a
    ``MasterNotFoundError`` (one per sentinel asked) cut to ``host:port``."""
    text = str(exc)
    sentinel = sys.modules.get("redis.sentinel")
    if sentinel is not None and isinstance(exc, sentinel.MasterNotFoundError):
        text = _CLIENT_REPR.sub(r"sentinel \1:\2", text)
    return text
