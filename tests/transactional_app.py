"""The app of the transactional enqueue tests (imported by the test and by
its producer processes): ``tx.record`` records which order it ran for."""

from __future__ import annotations

import attrs

from chronos_trio import App


@attrs.frozen
class Record:
    order: int


def make_app(url: str, ran: list[int] | None = None) -> App:
    """An App on ``url`` whose ``tx.record`` appends its order to ``ran``,
    and ``tx.total`` returns its order's total (a result, kept)."""
    app = App(url)

    @app.task("tx.record")
    async def record(args: Record) -> None:
        if ran is not None:
            ran.append(args.order)

    @app.task("tx.total")
    async def total(args: Record) -> int:
        return args.order * 100

    return app
