"""The app of the transactional enqueue tests (imported by the test and by
its producer processes): one task, ``tx.record``, that records which order
it ran for."""

from __future__ import annotations

import attrs

from chronos_trio import App


@attrs.frozen
class Record:
    order: int


def make_app(url: str, ran: list[int] | None = None) -> App:
    """An App on ``url`` whose ``tx.record`` appends its order to ``ran``."""
    app = App(url)

    @app.task("tx.record")
    async def record(args: Record) -> None:
        if ran is not None:
            ran.append(args.order)

    return app
