"""What a store checker is asked (:meth:`~chronos_trio.store.CheckRole.check`),
read the same way by every backend's checker."""

from __future__ import annotations

from collections.abc import Sequence


def asked_queues(
    queues: Sequence[str] | None, *, batch: int, lease_grace: float
) -> list[str] | None:
    """The queues a check names, each once in the order given (None: every
    queue the store knows, which the caller lists). Raises ``ValueError``
    for a ``batch`` below 1 or a ``lease_grace`` that is not >= 0."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if not lease_grace >= 0:
        raise ValueError(f"lease_grace must be >= 0, got {lease_grace}")
    return None if queues is None else list(dict.fromkeys(queues))
