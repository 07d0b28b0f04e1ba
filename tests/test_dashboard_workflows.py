"""The dashboard's workflow page (issue 29 item 6): ``/workflows/<id>``
draws the steps (chains across, groups down) with states and timings, is
linked from a workflow job's page, and offers an abort (issue 29 item 1)
behind the same confirmation, CSRF and read-only rules as every action."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest

from chronos_trio import App, JobContext, JobState, MemoryStore, NewJob, chain, group
from chronos_trio.dashboard import dashboard_app
from chronos_trio.store.sqlite import SqliteStore
from tests._dashboard import XSS
from tests.test_dashboard import ORIGIN, act, client

WID = "order/7.a"  # a slash and a dot: the ID is one path segment's worth of text


async def started(app: App, workflow_id: str = WID) -> None:
    @app.task("wf.add")
    async def add(payload: int, job: JobContext) -> int:
        return payload + 1

    @app.task("wf.sum")
    async def total(payload: list[int], job: JobContext) -> int:
        return sum(payload)

    await app.enqueue_workflow(
        chain(add.s(1), group(add.s(), add.s()), total.s()), workflow_id=workflow_id
    )


@pytest.fixture(params=["memory", pytest.param("sqlite", marks=pytest.mark.sqlite)])
async def app(request: pytest.FixtureRequest) -> AsyncIterator[App]:
    if request.param == "memory":
        made = App(MemoryStore())
    else:
        made = App(SqliteStore.from_url(request.getfixturevalue("sqlite_url")))
    await started(made)
    try:
        yield made
    finally:
        await made.store.aclose()


async def test_the_workflow_page_draws_its_steps_and_is_linked_from_a_step(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        page = await web.get(f"/workflows/{quote(WID)}")
        assert page.status_code == 200, page.text
        html = page.text
        assert 'id="workflow-state">running<' in html
        assert 'class="wf-chain"' in html and 'class="wf-group"' in html
        assert f'id="step-{WID}.0"' in html and "not made yet" in html
        assert html.index(f"step-{WID}.0") < html.index(f"step-{WID}.1.0")
        assert 'id="action-abort-workflow"' in html
        job = await web.get("/job", params={"id": f"{WID}.0"})
        assert f'href="/workflows/{quote(WID)}"' in job.text and 'id="workflow-link"' in job.text
        last = await web.get("/job", params={"id": f"{WID}.2"})  # not made yet
        assert last.status_code == 404
        await app.store.enqueue_many(
            [NewJob(id=f"{WID}.9", queue="default", kind="wf.add", payload=b"1")]
        )
        stranger = await web.get("/job", params={"id": f"{WID}.9"})
        assert 'id="workflow-link"' not in stranger.text, "a dotted ID outside the flow"
        missing = await web.get("/workflows/nope")
        assert missing.status_code == 404 and "no record of it" in missing.text


async def test_abort_from_the_workflow_page(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        posted, shown = await act(web, "abort-workflow", id=WID, reason="ops")
        assert posted.headers["location"] == f"/workflows/{quote(WID, safe='')}"
        assert "workflow order/7.a cancelled" in shown.text
        assert 'id="workflow-state">cancelled<' in shown.text
        assert 'id="action-abort-workflow"' not in shown.text, "nothing left to abort"
    job = await app.store.get_job(f"{WID}.0")
    assert job is not None and job.state is JobState.ABORTED and "ops" in job.last_error


async def test_the_last_step_links_to_its_workflow_too() -> None:
    app = App(MemoryStore())
    await started(app, "solo")
    await app.store.enqueue_many(  # the last step, as the continuer makes it: no continuation
        [NewJob(id="solo.2", queue="default", kind="wf.sum", payload=b"[1]")]
    )
    async with client(dashboard_app(app)) as web:
        page = await web.get("/job", params={"id": "solo.2"})
        assert 'href="/workflows/solo"' in page.text


async def test_read_only_shows_no_abort_and_refuses_it(app: App) -> None:
    async with client(dashboard_app(app, read_only=True)) as web:
        html = (await web.get(f"/workflows/{quote(WID)}")).text
        assert "/confirm/" not in html and 'method="post"' not in html
        assert (await web.get("/confirm/abort-workflow", params={"id": WID})).status_code == 403
        posted = await web.post(
            "/actions/abort-workflow",
            data={"id": WID, "csrf": "whatever"},
            headers={"origin": ORIGIN},
        )
        assert posted.status_code == 403 and "read-only" in posted.text
    async with client(dashboard_app(app)) as web:
        # not read-only, but no CSRF token / another origin: refused as well
        posted = await web.post(
            "/actions/abort-workflow", data={"id": WID}, headers={"origin": ORIGIN}
        )
        assert posted.status_code == 403
    job = await app.store.get_job(f"{WID}.0")
    assert job is not None and job.state is JobState.READY


async def test_markup_in_a_workflow_id_is_escaped() -> None:
    app = App(MemoryStore())
    await started(app, XSS)
    async with client(dashboard_app(app)) as web:
        page = await web.get(f"/workflows/{quote(XSS, safe='')}")
        assert page.status_code == 200
        assert XSS not in page.text
