"""Shared pytest fixtures. Redis/cluster fixtures live in tests/_redis_fixtures.py."""

from __future__ import annotations

from tests._redis_fixtures import *  # noqa: F403
