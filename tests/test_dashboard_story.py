"""A job's whole story on its page: the timeline of its attempts (worker,
times, outcome, error), its log lines and progress, and its place in a
workflow with links to the steps behind it (``dashboard/_story.py``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from chronos_trio import App, MemoryStore
from chronos_trio.dashboard import dashboard_app
from chronos_trio.dashboard._story import first_step_id, position, timeline
from chronos_trio.records._attempts import Attempt, AttemptOutcome
from chronos_trio.records._flow_build import chain, group, start
from chronos_trio.records._jobs import Job, JobState
from chronos_trio.records._workflow import advance
from chronos_trio.store import QueueWeight, SettleKind, Settlement
from tests._dashboard import populate_dashboard
from tests.tests_app import make_app

ORIGIN = "http://localhost"


@pytest.fixture
async def app() -> AsyncIterator[App]:
    yield await populate_dashboard(MemoryStore())


@pytest.fixture
async def web(app: App) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=dashboard_app(app))
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as c:
        yield c


def flow_jobs() -> dict[str, Job]:
    """The jobs of workflow ``W``: chain(a, group(b, c), callback), as the
    continuer makes them (first the chain's head, then the group's
    members once it succeeded), as Job records."""
    app = make_app(None)
    member, callback = app.tasks["tests.wf_member"], app.tasks["tests.wf_callback"]
    node = chain(member.s(1), group(member.s(), member.s()), callback.s())
    [head] = start(node, "W").jobs
    assert head.then is not None
    members = advance(head.then, b"1").jobs
    out = {}
    for new in (head, *members):
        out[new.id] = Job(
            id=new.id, queue=new.queue, kind=new.kind, payload=new.payload, run_at=0.0,
            state=JobState.READY, then=new.then,
        )  # fmt: skip
    return out


def test_a_workflow_step_knows_its_workflow_path_and_what_waits_behind_it() -> None:
    jobs = flow_jobs()
    assert sorted(jobs) == ["W.0", "W.1.0", "W.1.1"]
    head = position(jobs["W.0"])
    assert head is not None and head.workflow_id == "W" and head.path == "0"
    assert [s.job_id for s in head.behind] == [None, "W.1.0", "W.1.1", "W.2"]
    assert "group W.1 of 2" in head.behind[0].text and not head.inferred
    member = position(jobs["W.1.1"])
    assert member is not None and member.workflow_id == "W" and member.path == "1.1"
    assert member.groups == ("member 1 of group W.1 (2 in all)",)
    assert [s.job_id for s in member.behind] == [None, "W.2"]


def test_the_last_step_and_plain_jobs() -> None:
    last = Job(id="W.2", queue="q", kind="k", payload=b"1", run_at=0.0, state=JobState.READY)
    assert first_step_id(last) == "W.0"
    assert position(last) is None, "without its first step found, a dotted ID is a plain job"
    found = position(last, first_step_exists=True)
    assert found is not None and found.workflow_id == "W" and found.last and found.path == "2"
    plain = Job(id="abc", queue="q", kind="k", payload=b"1", run_at=0.0, state=JobState.READY)
    assert first_step_id(plain) is None and position(plain) is None
    damaged = Job(
        id="x.0", queue="q", kind="k", payload=b"1", run_at=0.0, state=JobState.READY,
        then='{"seq": 5}',
    )  # fmt: skip
    got = position(damaged)
    assert got is not None and got.damaged, "a damaged continuation is said, never raised"


def test_the_timeline_is_every_attempt_in_time_order() -> None:
    job = Job(
        id="j", queue="q", kind="k", payload=b"1", run_at=50.0, state=JobState.RETRY_WAIT,
        created_at=10.0, attempts=2,
    )  # fmt: skip
    attempts = (
        Attempt(1, AttemptOutcome.EXPIRED, "w1", 11.0, 41.0, "lease expired"),
        Attempt(2, AttemptOutcome.RETRIED, "w2", 42.0, 42.5, "ValueError: boom"),
    )
    story = timeline(job, attempts, None)
    assert [e.what for e in story] == [
        "enqueued",
        "attempt 1 started",
        "attempt 1 its lease expired (worker lost); taken back after 30 s",
        "attempt 2 started",
        "attempt 2 failed; retried later after 0.5 s",
        "retry due",
    ]
    assert [e.at for e in story] == [10.0, 11.0, 41.0, 42.0, 42.5, 50.0]
    assert story[1].detail == "on w1" and story[4].detail == "ValueError: boom"
    assert story[4].tone == "bad"


async def test_job_page_tells_the_attempt_history_as_a_timeline(web: httpx.AsyncClient) -> None:
    page = await web.get("/job", params={"id": "dead-1"})
    assert page.status_code == 200
    html = page.text
    assert 'id="timeline"' in html
    story = html[html.index('id="timeline"') :]
    assert "enqueued" in story
    assert "attempt 1 failed for good (dead)" in story
    assert "on testhost:4242:0" in story and "PayloadError: bad" in story
    assert 'id="workflow-position"' not in html, "a plain job shows no workflow"


async def test_job_page_shows_log_lines_and_the_running_attempt(app: App) -> None:
    store = app.store
    await app.tasks["tests.record"].enqueue(make_record(), job_id="story-1", queue="story")
    [leased] = (
        await store.lease([QueueWeight("story")], 10, worker_id="host:1:0", lease_duration=60)
    ).jobs
    assert leased.job.id == "story-1"
    from chronos_trio.records._notes import NoteWrite, Progress

    await store.write_notes([NoteWrite(leased.ref, Progress(0.5, "half"), ("fetched 3 rows",))])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dashboard_app(app)), base_url=ORIGIN
    ) as web:
        html = (await web.get("/job", params={"id": "story-1"})).text
    story = html[html.index('id="timeline"') :]
    assert "attempt 1 running" in story and "on host:1:0" in story
    assert "fetched 3 rows" in story and "50% half" in story
    await store.settle([Settlement(leased.ref, SettleKind.RELEASE)])


def make_record() -> object:
    from tests.tests_app import Record

    return Record("k")


async def test_workflow_steps_link_to_each_other_and_to_the_workflow_page() -> None:
    store = MemoryStore()
    app = make_app(None)
    app.use_store(store)
    member, callback = app.tasks["tests.wf_member"], app.tasks["tests.wf_callback"]
    await app.enqueue_workflow(
        chain(member.s(1), group(member.s(), member.s()), callback.s()), workflow_id="order.7"
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dashboard_app(app)), base_url=ORIGIN
    ) as web:
        html = (await web.get("/job", params={"id": "order.7.0"})).text
    assert 'href="/workflows/order.7"' in html, "the workflow's page, by its ID (dots and all)"
    section = html[html.index('id="workflow-position"') : html.index('id="story-title"')]
    assert "<code>0</code>" in section
    for step in ("order.7.1.0", "order.7.1.1", "order.7.2"):
        assert f'href="/job?id={step}"' in section, step
    assert json.dumps("group order.7.1 of 2")[1:-1] in section


def test_a_graph_step_knows_its_graph_and_the_steps_after_it() -> None:
    from chronos_trio.records._graph import Graph

    app = make_app(None)
    member, callback = app.tasks["tests.wf_member"], app.tasks["tests.wf_callback"]
    g = Graph()
    g.add("fetch", member.s(1))
    g.add("left", member.s(), after="fetch")
    g.add("right", member.s(), after="fetch")
    g.add("join", callback.s(), after=["left", "right"])
    [root] = start(g.freeze(), "G").jobs
    assert root.id == "G.fetch" and root.then is not None
    job = Job(
        id=root.id, queue=root.queue, kind=root.kind, payload=root.payload, run_at=0.0,
        state=JobState.READY, then=root.then,
    )  # fmt: skip
    got = position(job)
    assert got is not None and not got.damaged
    assert got.workflow_id == "G" and got.path == "fetch"
    assert got.groups == ("step fetch of graph G",)
    assert [s.job_id for s in got.behind] == ["G.left", "G.right", None, "G.join"]
    assert "once left, right are in" in got.behind[2].text
