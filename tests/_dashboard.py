"""What the dashboard tests share: a store with jobs in every state, one of
them carrying markup in its payload and its error."""

from __future__ import annotations

import re

from chronos_trio import App, QueueWeight
from chronos_trio.store import SettleKind, Settlement, Store
from tests.test_cli import populate
from tests.tests_app import Note, make_app

#: Markup in a payload and an error: must show as text, never run.
XSS = "<script>window.__xss = 1; alert('xss')</script>"
XSS_ERROR = '<img src=x onerror="window.__xss = 2">'


async def populate_dashboard(store: Store) -> App:
    """``tests.test_cli.populate`` (every state of queue ``default``, and
    ``note-1`` in ``critical``) plus ``xss-1``: a dead job of ``critical``
    whose payload and last error hold markup. Returns the app on ``store``."""
    await populate(store)
    app = make_app(None)
    app.use_store(store)
    await app.tasks["tests.note"].enqueue(Note(XSS), job_id="xss-1")
    leased = await store.lease([QueueWeight("critical")], 10, worker_id="w:1:0", lease_duration=600)
    by_id = {lj.job.id: lj for lj in leased}
    await store.settle([Settlement(by_id["xss-1"].ref, SettleKind.DEAD, XSS_ERROR)])
    # note-1 was leased too: hand it back to ready
    await store.settle([Settlement(by_id["note-1"].ref, SettleKind.RETRY, "again")])
    return app


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, html
    return match.group(1)
