"""Shared pytest fixtures. Redis/cluster fixtures live in tests/_redis_fixtures.py,
the runtime tests' memory-and-Redis ``backend`` in tests/_backends.py."""

from __future__ import annotations

from tests._backends import *  # noqa: F403
from tests._redis_fixtures import *  # noqa: F403
