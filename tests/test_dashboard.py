"""The web dashboard as an ASGI app, driven with httpx in-process on the
memory store (and the tests taking ``app`` on a SQLite file too):
authentication, read-only mode, CSRF, escaping, every action, paging, the
live event stream, and the ``dashboard`` command."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from chronos_trio import App, Inspector, JobState, MemoryStore, WorkerInfo
from chronos_trio.cli import EXIT_BAD_URL, EXIT_USAGE, main
from chronos_trio.dashboard import ASGIApp, dashboard_app
from chronos_trio.store import VersionState
from chronos_trio.store.sqlite import SqliteStore
from tests._dashboard import XSS, XSS_ERROR, csrf_of, populate_dashboard
from tests.tests_app import Note, Record

#: Where the tests' requests go: a loopback name, allowed by default.
ORIGIN = "http://localhost"


@pytest.fixture(params=["memory", pytest.param("sqlite", marks=pytest.mark.sqlite)])
async def app(request: pytest.FixtureRequest) -> AsyncIterator[App]:
    """The populated app, on the memory store and on a SQLite file (the
    dashboard reads and acts through the store's roles alone)."""
    if request.param == "memory":
        yield await populate_dashboard(MemoryStore())
        return
    store = SqliteStore.from_url(request.getfixturevalue("sqlite_url"))
    try:
        yield await populate_dashboard(store)
    finally:
        await store.aclose()


def client(asgi: ASGIApp, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=ORIGIN, **kw)


@pytest.fixture
async def web(app: App) -> AsyncIterator[httpx.AsyncClient]:
    async with client(dashboard_app(app)) as c:
        yield c


async def act(
    web: httpx.AsyncClient, action: str, **fields: str
) -> tuple[httpx.Response, httpx.Response]:
    """Open ``action``'s confirmation page, then press its button: the POST's
    response (303) and the page it leads to."""
    query = {k: v for k, v in fields.items() if k in ("id", "queue", "version")}
    confirm = await web.get(f"/confirm/{action}", params=query)
    assert confirm.status_code == 200, confirm.text
    form = {"csrf": csrf_of(confirm.text), **fields}
    posted = await web.post(f"/actions/{action}", data=form, headers={"origin": ORIGIN})
    assert posted.status_code == 303, posted.text
    return posted, await web.get(posted.headers["location"])


async def state(app: App, job_id: str) -> JobState | None:
    job = await app.store.get_job(job_id)
    return None if job is None else job.state


# -- pages ----------------------------------------------------------------------------
async def test_queues_page_counts_versions_and_security_headers(web: httpx.AsyncClient) -> None:
    page = await web.get("/")
    assert page.status_code == 200
    html = page.text
    assert 'data-queue="default" data-state="dead">2<' in html
    assert 'data-queue="default" data-state="leased">1<' in html
    assert 'data-queue="critical" data-state="dead">1<' in html
    assert 'data-queue="default" data-field="total">7<' in html
    assert "/jobs?queue=default&amp;state=dead" in html
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in html.replace('<script src="/static/dashboard.js" defer></script>', "")
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


async def test_job_detail_shows_payload_error_attempts_and_lease(web: httpx.AsyncClient) -> None:
    leased = (await web.get("/job", params={"id": "leased-1"})).text
    assert "held by testhost:4242:0, expires" in leased
    assert "1 of 4 (retries left: 3)" in leased
    dead = (await web.get("/job", params={"id": "dead-1", "queue": "default"})).text
    assert "PayloadError: bad\ntrace line" in dead
    assert 'id="action-requeue"' in dead and 'id="action-delete"' in dead
    assert 'id="action-abort"' not in dead, "a dead job has finished: nothing to abort"
    done = (await web.get("/job", params={"id": "done-1"})).text
    assert '<pre id="result">{\n  &#34;total&#34;: 5\n}</pre>' in done
    lookup = await web.get("/lookup", params={"id": "done-1"})
    assert lookup.status_code == 303 and lookup.headers["location"] == "/job?id=done-1"
    missing = await web.get("/job", params={"id": "nope"})
    assert missing.status_code == 404 and "no job with id &#39;nope&#39;" in missing.text


async def test_payload_and_error_markup_is_escaped(web: httpx.AsyncClient) -> None:
    html = (await web.get("/job", params={"id": "xss-1"})).text
    assert XSS not in html and XSS_ERROR not in html
    assert "&lt;script&gt;window.__xss = 1; alert(&#39;xss&#39;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&#34;window.__xss = 2&#34;&gt;" in html
    listing = (await web.get("/jobs", params={"queue": "critical", "state": "dead"})).text
    assert XSS_ERROR not in listing and "&lt;img src=x" in listing


async def test_paging_through_a_state(web: httpx.AsyncClient) -> None:
    first = await web.get("/jobs", params={"queue": "default", "state": "dead", "limit": "1"})
    assert "dead jobs 1-1 of 2" in first.text
    assert 'rel="next" href="/jobs?queue=default&amp;state=dead&amp;offset=1&amp;limit=1"' in (
        first.text
    )
    assert 'rel="prev"' not in first.text
    second = await web.get(
        "/jobs", params={"queue": "default", "state": "dead", "offset": "1", "limit": "1"}
    )
    assert "dead jobs 2-2 of 2" in second.text and 'rel="next"' not in second.text
    assert 'rel="prev"' in second.text
    ids = {f"dead-{n}" for n in (1, 2) if f">dead-{n}<" in first.text + second.text}
    assert ids == {"dead-1", "dead-2"}
    assert (await web.get("/jobs", params={"queue": "default", "state": "nope"})).status_code == 400
    assert (await web.get("/jobs", params={"queue": "x", "state": "dead"})).status_code == 404
    bad = await web.get("/jobs", params={"queue": "default", "state": "dead", "offset": "-1"})
    assert bad.status_code == 400


async def test_limits_on_the_job_queue_and_limits_pages(app: App, web: httpx.AsyncClient) -> None:
    await app.tasks["tests.rated"].enqueue(Record("k"), job_id="rated-1", priority=5)
    job = (await web.get("/job", params={"id": "rated-1"})).text
    assert "<th>Priority</th><td>5</td>" in job
    assert "<th>Rate limit</th><td>50/1s burst 5, key tests.rated</td>" in job
    for page in (await web.get("/limits"), await web.get("/queue", params={"name": "flow"})):
        assert "<td>rate</td><td><code>tests.rated</code></td><td>50/1s burst 5</td>" in page.text
        assert "<td>concurrency</td><td><code>tests.capped</code></td><td>4</td>" in page.text


async def test_schedules_page(app: App) -> None:
    async with client(dashboard_app(app.inspector())) as web:
        page = await web.get("/schedules")
        assert page.status_code == 200 and "The app declares no schedules" in page.text
    app.cron("*/5 * * * *", Note("digest"))
    async with client(dashboard_app(app)) as web:
        page = (await web.get("/schedules")).text
        assert "<code>*/5 * * * *</code>" in page and "tests.note" in page
        assert "none (no worker leads now)" in page and "never" in page
    async with client(dashboard_app(Inspector(app.store))) as web:
        page = (await web.get("/schedules")).text
        assert "Schedules are declared in the app" in page


async def test_workers_page_lists_live_workers(app: App, web: httpx.AsyncClient) -> None:
    empty = await web.get("/workers")
    assert empty.status_code == 200 and "No live workers" in empty.text
    now = await app.store.now()
    for pid, running in ((4242, ("leased-1",)), (77, ())):
        info = WorkerInfo(
            worker_id=f"testhost:{pid}:0",
            host="testhost",
            pid=pid,
            queues=("default", "critical"),
            concurrency=8,
            started_at=now - 30,
            last_beat=now,
            running=len(running) + (2 if running else 0),
            running_job_ids=running,
        )
        await app.store.beat_worker(info, ttl=60)
    html = (await web.get("/workers")).text
    assert html.index("testhost:77:0") < html.index("testhost:4242:0"), "by host, then pid"
    assert '<a href="/job?id=leased-1"><code>leased-1</code></a>' in html
    assert "and 2 more" in html and "default, critical" in html
    assert "2 worker process(es), 3 of 16 handler slots busy" in html
    await app.store.unregister_worker("testhost:77:0")
    assert "testhost:77:0" not in (await web.get("/workers")).text


# -- actions --------------------------------------------------------------------------
async def test_each_action_changes_the_store(app: App, web: httpx.AsyncClient) -> None:
    _, page = await act(web, "requeue", id="dead-1", queue="default")
    assert await state(app, "dead-1") is JobState.READY
    assert "dead job dead-1 requeued" in page.text
    assert "requeued" not in (await web.get("/")).text, "the message shows once"

    await act(web, "run-now", id="scheduled-1", queue="default")
    assert await state(app, "scheduled-1") is JobState.READY

    _, page = await act(web, "delete", id="dead-2", queue="default")
    assert await state(app, "dead-2") is None
    assert str(page.url).endswith("/jobs?queue=default&state=dead")

    await act(web, "abort", id="ready-1", queue="default", reason="not needed")
    job = await app.store.get_job("ready-1")
    assert job is not None and job.state is JobState.ABORTED
    assert job.last_error == "aborted: not needed"

    await act(web, "pause", queue="default")
    assert (await app.inspector().queue("default")).paused
    await act(web, "resume", queue="default")
    assert not (await app.inspector().queue("default")).paused

    assert await state(app, "xss-1") is JobState.DEAD
    _, page = await act(web, "requeue-dead", queue="critical")
    assert await state(app, "xss-1") is JobState.READY
    assert "requeued 1 dead job(s) of queue critical" in page.text

    await act(web, "promote", queue="critical", partitions="3")
    topology = await app.inspector().topology("critical")
    assert [(v.version, v.partitions, v.state) for v in topology.versions] == [
        (1, 1, VersionState.DRAINING),
        (2, 3, VersionState.ACTIVE),
    ]
    for job_id in ("note-1", "xss-1"):
        await app.inspector().delete(job_id)
    await act(web, "complete", queue="critical", version="1")
    topology = await app.inspector().topology("critical")
    assert [v.version for v in topology.versions] == [2]


async def test_refused_action_is_a_409_page(app: App, web: httpx.AsyncClient) -> None:
    confirm = await web.get("/confirm/run-now", params={"id": "leased-1", "queue": "default"})
    posted = await web.post(
        "/actions/run-now",
        data={"csrf": csrf_of(confirm.text), "id": "leased-1", "queue": "default"},
        headers={"origin": ORIGIN},
    )
    assert posted.status_code == 409 and "run-now applies to scheduled" in posted.text
    assert await state(app, "leased-1") is JobState.LEASED


async def test_actions_need_post_csrf_and_same_origin(app: App, web: httpx.AsyncClient) -> None:
    confirm = await web.get("/confirm/requeue", params={"id": "dead-1", "queue": "default"})
    token = csrf_of(confirm.text)
    fields = {"id": "dead-1", "queue": "default"}
    # no token, a wrong one, one from another session, another origin, GET
    refused = [
        await web.post("/actions/requeue", data=fields, headers={"origin": ORIGIN}),
        await web.post(
            "/actions/requeue", data={**fields, "csrf": token + "x"}, headers={"origin": ORIGIN}
        ),
        await web.post(
            "/actions/requeue",
            data={**fields, "csrf": token},
            headers={"origin": "https://evil.example"},
        ),
        await web.post("/actions/requeue", data={**fields, "csrf": token}),  # no Origin/Referer
        await web.post(
            "/actions/requeue",
            data={**fields, "csrf": token},
            headers={"origin": "null", "referer": ORIGIN + "/"},
        ),
    ]
    async with client(dashboard_app(app)) as other:
        await other.get("/")
        refused.append(
            await other.post(
                "/actions/requeue", data={**fields, "csrf": token}, headers={"origin": ORIGIN}
            )
        )
    assert [r.status_code for r in refused] == [403] * 6, [r.text for r in refused]
    assert "CSRF" in refused[0].text and "Origin" in refused[2].text
    assert (await web.get("/actions/requeue", params=fields)).status_code == 405
    assert await state(app, "dead-1") is JobState.DEAD, "nothing was requeued"
    # a Referer alone from this dashboard is enough with the token
    ok = await web.post(
        "/actions/requeue",
        data={**fields, "csrf": token},
        headers={"referer": ORIGIN + "/confirm/requeue"},
    )
    assert ok.status_code == 303 and await state(app, "dead-1") is JobState.READY


async def test_allowed_origin_behind_a_proxy(app: App) -> None:
    asgi = dashboard_app(
        app, allowed_origins=["https://admin.example"], allowed_hosts=["10.0.0.5:8080"]
    )
    async with client(asgi) as web:
        confirm = await web.get("/confirm/pause", params={"queue": "default"})
        posted = await web.post(
            "/actions/pause",
            data={"csrf": csrf_of(confirm.text), "queue": "default"},
            headers={"origin": "https://admin.example", "host": "10.0.0.5:8080"},
        )
        assert posted.status_code == 303
        assert (await app.inspector().queue("default")).paused


async def test_read_only_renders_no_actions_and_refuses_them(app: App) -> None:
    async with client(dashboard_app(app, read_only=True)) as web:
        for path, params in [
            ("/job", {"id": "dead-1"}),
            ("/queue", {"name": "default"}),
            ("/job", {"id": "scheduled-1"}),
        ]:
            html = (await web.get(path, params=params)).text
            assert "<form" in html  # the lookup form in the header ...
            assert 'method="post"' not in html and "/confirm/" not in html  # ... and no other
            assert 'class="button' not in html  # no action buttons
        assert "read-only" in html
        confirm = await web.get("/confirm/requeue", params={"id": "dead-1", "queue": "default"})
        assert confirm.status_code == 403
        posted = await web.post(
            "/actions/requeue",
            data={"id": "dead-1", "queue": "default", "csrf": "whatever"},
            headers={"origin": ORIGIN},
        )
        assert posted.status_code == 403 and "read-only" in posted.text
    assert await state(app, "dead-1") is JobState.DEAD


# -- authentication -----------------------------------------------------------------
async def test_token_auth(app: App) -> None:
    asgi = dashboard_app(app, token="s3cret")
    async with client(asgi) as web:
        assert (await web.get("/")).status_code == 401
        assert (await web.get("/", params={"token": "wrong"})).status_code == 401
        assert (await web.get("/events")).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer wrong"})).status_code == 401
        assert (await web.get("/", headers={"authorization": "Bearer s3cret"})).status_code == 200
        assert (await web.get("/")).status_code == 401, "a header signs in no session"
        signed = await web.get(
            "/jobs", params={"queue": "default", "state": "dead", "token": "s3cret"}
        )
        assert signed.status_code == 200 and "Signed in" in signed.text
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "s3cret" not in cookie
        assert 'url=/jobs?queue=default&amp;state=dead"' in signed.text, "token left out"
        assert (await web.get("/")).status_code == 200, "the cookie signs in"
        _, page = await act(web, "pause", queue="default")
        assert page.status_code == 200 and (await app.inspector().queue("default")).paused
    async with client(asgi, cookies={"chronos_dashboard_session": "forged.mac"}) as other:
        assert (await other.get("/")).status_code == 401


async def test_basic_auth(app: App) -> None:
    async with client(dashboard_app(app, basic_auth="ops:pw")) as web:
        refused = await web.get("/")
        assert refused.status_code == 401 and "Basic" in refused.headers["www-authenticate"]
        wrong = base64.b64encode(b"ops:nope").decode()
        assert (await web.get("/", headers={"authorization": f"Basic {wrong}"})).status_code == 401
        assert (await web.get("/", params={"token": "x"})).status_code == 401
    async with client(dashboard_app(app, basic_auth=("ops", "pw")), auth=("ops", "pw")) as web:
        assert (await web.get("/")).status_code == 200
        await act(web, "requeue", id="dead-1", queue="default")
    assert await state(app, "dead-1") is JobState.READY
    with pytest.raises(ValueError, match="not both"):
        dashboard_app(app, token="t", basic_auth="a:b")
    with pytest.raises(ValueError, match="USER:PASS"):
        dashboard_app(app, basic_auth="nopass")


async def test_mounted_under_a_prefix(app: App) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    outer = Starlette(routes=[Mount("/ops/jobs", app=dashboard_app(app))])
    async with client(outer) as web:
        page = await web.get("/ops/jobs/")
        assert page.status_code == 200
        assert 'href="/ops/jobs/static/dashboard.css"' in page.text
        assert "/ops/jobs/jobs?queue=default&amp;state=dead" in page.text
        assert "Path=/ops/jobs" in page.headers["set-cookie"]
        _, done = await act_at(web, "/ops/jobs", "requeue", id="dead-1", queue="default")
        assert str(done.url).endswith("/ops/jobs/job?id=dead-1&queue=default")
    assert await state(app, "dead-1") is JobState.READY


async def act_at(
    web: httpx.AsyncClient, base: str, action: str, **fields: str
) -> tuple[httpx.Response, httpx.Response]:
    confirm = await web.get(f"{base}/confirm/{action}", params=fields)
    assert f'action="{base}/actions/{action}"' in confirm.text
    posted = await web.post(
        f"{base}/actions/{action}",
        data={"csrf": csrf_of(confirm.text), **fields},
        headers={"origin": ORIGIN},
    )
    assert posted.status_code == 303, posted.text
    return posted, await web.get(posted.headers["location"])


# -- live updates ---------------------------------------------------------------------
async def test_event_stream_sends_counts_as_they_change(app: App) -> None:
    """Drive the ASGI app by hand: httpx's in-process transport waits for a
    response to end, and an event stream does not."""
    asgi = dashboard_app(app, refresh=0.05)
    to_app_send, to_app_recv = trio.open_memory_channel[dict[str, Any]](10)
    events: list[dict[str, Any]] = []
    chunks = trio.open_memory_channel[bytes](100)
    start: dict[str, Any] = {}

    async def receive() -> dict[str, Any]:
        return await to_app_recv.receive()

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body" and message.get("body"):
            await chunks[0].send(message["body"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/events",
        "raw_path": b"/events",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"localhost")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def next_counts() -> dict[str, Any]:
        while True:
            text = (await chunks[1].receive()).decode()
            if text.startswith("event: counts"):
                data: dict[str, Any] = json.loads(text.split("data: ", 1)[1])
                return data

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(asgi, scope, receive, send)
            first = await next_counts()
            events.append(first)
            assert first["queues"]["default"]["counts"]["dead"] == 2
            await app.inspector().requeue_dead("default")
            while True:
                later = await next_counts()
                if later["queues"]["default"]["counts"]["dead"] == 0:
                    break
            assert later["queues"]["default"]["counts"]["ready"] == 1 + 2
            await to_app_send.send({"type": "http.disconnect"})
    assert start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert b"content-security-policy" in headers


# -- the command ------------------------------------------------------------------------
def test_dashboard_command_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", "--url", "memory://", "--port", "0"]) == EXIT_BAD_URL
    assert "memory:// lives inside one process" in capsys.readouterr().err
    code = main(
        ["dashboard", "--url", "redis://x", "--port", "0", "--token", "a", "--basic-auth", "u:p"]
    )
    assert code == EXIT_USAGE
    assert main(["dashboard", "--url", "redis://x"]) == EXIT_USAGE  # --port is required
    capsys.readouterr()


@pytest.mark.redis
def test_dashboard_command_serves_a_redis_store(redis_url: str) -> None:
    """``python -m chronos_trio dashboard --url URL --port 0 --token T`` in a
    subprocess: it says where it listens, wants the token, and shows the store."""

    async def fill() -> None:
        from chronos_trio.store.redis import RedisStore

        store = RedisStore.from_url(redis_url)
        try:
            await populate_dashboard(store)
        finally:
            await store.aclose()

    trio.run(fill)
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": root, "CHRONOS_DASHBOARD_TOKEN": "t0k"}
    env.pop("CHRONOS_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "chronos_trio", "dashboard", "--url", redis_url, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        line = ""
        for _ in range(50):
            line = proc.stderr.readline()
            if line.startswith("dashboard for"):
                break
        assert " on http://127.0.0.1:" in line, line
        base = line.rsplit(" on ", 1)[1].strip()
        assert httpx.get(base + "/", timeout=5).status_code == 401
        page = httpx.get(base + "/", headers={"authorization": "Bearer t0k"}, timeout=5)
        assert page.status_code == 200
        assert 'data-queue="default" data-state="dead">2<' in page.text
        proc.terminate()
        assert proc.wait(timeout=10) == 0, "SIGTERM stops it cleanly"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
