"""What the thread peers' producers (Dramatiq, huey, Celery) share: a
synchronous ``enqueue`` with the driver's signature (see ``__main__``), over
the calls each peer makes its own way (standard library only)."""

from __future__ import annotations

from typing import Any

from benchmarks._common import PAD_PEER


class ThreadProducer:
    """A thread peer's producer: ``tasks`` maps a kind to the peer's task;
    a subclass says how to send one now (:meth:`send`), at a wall time
    (:meth:`send_at`) and after a delay (:meth:`send_after`, the peer's own
    delay argument). The peer module's own client is used (its URL comes
    from the environment), so :meth:`open` does nothing."""

    bulk = False  # none of the thread peers has a batch enqueue
    tasks: dict[str, Any] = {}

    def open(self, url: str) -> None:
        pass

    def close(self) -> None:
        pass

    def enqueue(
        self, sent_at: float, due_at: float = 0.0, *, kind: str = "noop", hold: float = 0.0
    ) -> None:
        task = self.tasks[kind]
        args = (sent_at, due_at, hold, PAD_PEER)
        if due_at:
            self.send_at(task, args, due_at)
        else:
            self.send(task, args)

    def enqueue_data(self, data: str, delay: float) -> None:
        """A job of the memory workload's task (``tasks["blob"]``, one str
        argument) due ``delay`` s from now."""
        self.send_after(self.tasks["blob"], (data,), delay)

    def send(self, task: Any, args: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def send_after(self, task: Any, args: tuple[Any, ...], delay: float) -> None:
        raise NotImplementedError

    def send_at(self, task: Any, args: tuple[Any, ...], due_at: float) -> None:
        raise NotImplementedError
