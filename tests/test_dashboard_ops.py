"""The operator's console, queue side: purging a queue from the dashboard
(its confirmation states the counts per state), the warning for waiting jobs
no live worker will run, live updates of every table, and an app's own
pages and panels (``dashboard.Extensions``), all behind the same
authentication, CSRF and read-only rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from chronos_trio import App, JobState, MemoryStore, WorkerInfo
from chronos_trio.dashboard import ExtensionRequest, Extensions, dashboard_app
from tests._dashboard import csrf_of, populate_dashboard

ORIGIN = "http://localhost"
TEMPLATES = Path(__file__).parent / "data" / "dashboard_ext"


@pytest.fixture
async def app() -> AsyncIterator[App]:
    yield await populate_dashboard(MemoryStore())


def client(asgi: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=ORIGIN)  # type: ignore[arg-type]


# -- purge ------------------------------------------------------------------------------
async def test_purge_confirmation_states_the_counts_then_purges(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        queue_page = (await web.get("/queue", params={"name": "default"})).text
        assert 'id="action-purge"' in queue_page
        before = (await app.inspector().queue("default")).counts
        confirm = await web.get("/confirm/purge", params={"queue": "default"})
        assert confirm.status_code == 200
        table = confirm.text[confirm.text.index('id="purge-counts"') :]
        for state in (JobState.SCHEDULED, JobState.READY, JobState.DEAD):
            assert f'<th>{state.value}</th><td class="num">{before[state]}</td>' in table
        assert "<th>leased</th>" not in table.split("</table>")[0]
        assert "1 leased job(s) are left to finish" in confirm.text
        posted = await web.post(
            "/actions/purge",
            data={"csrf": csrf_of(confirm.text), "queue": "default"},
            headers={"origin": ORIGIN},
        )
        assert posted.status_code == 303
        page = await web.get(posted.headers["location"])
        doomed = sum(n for s, n in before.items() if s is not JobState.LEASED)
        assert f"purged queue default: deleted {doomed} job(s); 1 leased job(s) left" in page.text
    after = (await app.inspector().queue("default")).counts
    assert {s: n for s, n in after.items() if n} == {JobState.LEASED: 1}
    assert (await app.inspector().queue("critical")).total == 2, "another queue is untouched"


async def test_purge_is_refused_read_only_and_without_csrf(app: App) -> None:
    async with client(dashboard_app(app, read_only=True)) as web:
        html = (await web.get("/queue", params={"name": "default"})).text
        assert "purge" not in html.lower()
        assert (await web.get("/confirm/purge", params={"queue": "default"})).status_code == 403
        posted = await web.post(
            "/actions/purge", data={"queue": "default", "csrf": "x"}, headers={"origin": ORIGIN}
        )
        assert posted.status_code == 403
    async with client(dashboard_app(app)) as web:
        await web.get("/")
        posted = await web.post(
            "/actions/purge", data={"queue": "default"}, headers={"origin": ORIGIN}
        )
        assert posted.status_code == 403 and "CSRF" in posted.text
    assert (await app.inspector().queue("default")).counts[JobState.DEAD] == 2, "nothing went"


# -- jobs no live worker will run ---------------------------------------------------------
def worker(queues: tuple[str, ...], kinds: tuple[str, ...] | None) -> WorkerInfo:
    return WorkerInfo("h:1:x", "h", 1, queues, 4, 0.0, 0.0, 0, (), kinds)


async def test_queues_page_warns_of_jobs_no_live_worker_will_run(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        html = (await web.get("/")).text
        assert 'id="unserved"' in html and "no live worker consumes this queue" in html
        # a worker of "default" that handles another kind only: its jobs are named by kind
        await app.store.beat_worker(worker(("default",), ("other.kind",)), 30)
        html = (await web.get("/")).text
        warning = html[
            html.index('id="unserved"') : html.index("</div>", html.index('id="unserved"'))
        ]
        assert "<code>tests.record</code>" in warning and "no live worker of this queue" in warning
        assert 'Queue <a href="/queue?name=critical">critical</a>: 1 waiting' in warning
        # once it handles it (and critical's), nothing is left to warn about
        await app.store.beat_worker(
            worker(("default", "critical"), ("tests.record", "tests.note")), 30
        )
        assert 'id="unserved"' not in (await web.get("/")).text
        # a worker that does not report its kinds (an older version): not judged by kind
        await app.store.beat_worker(worker(("default", "critical"), None), 30)
        assert 'id="unserved"' not in (await web.get("/")).text


# -- live updates ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "params", "regions"),
    [
        ("/", {}, ["live-unserved", "live-versions"]),
        ("/queue", {"name": "default"}, ["live-versions", "live-limits"]),
        ("/jobs", {"queue": "default", "state": "dead"}, ["live-jobs"]),
        ("/job", {"id": "dead-1"}, ["live-details", "live-story", "live-attempts"]),
        ("/workers", {}, ["live-workers"]),
        ("/limits", {}, ["live-limits"]),
        ("/schedules", {}, ["live-schedules"]),
    ],
)
async def test_every_table_of_a_page_is_a_live_region(
    app: App, path: str, params: dict[str, str], regions: list[str]
) -> None:
    """The page's script reads the page again and swaps in each region
    marked data-live (the browser test watches one change); the counts
    cells are live through the event stream already."""
    async with client(dashboard_app(app, refresh=0.5)) as web:
        html = (await web.get(path, params=params)).text
    assert 'data-live-every="2000"' in html
    for region in regions:
        assert f'<div id="{region}" data-live' in html, region
    tables = html.count("<table")
    live = sum(html[html.index(f'id="{r}"') :].split("</div>")[0].count("<table") for r in regions)
    counts = html.count('<table class="counts"')
    assert tables == live + counts, f"{path}: a table outside the live regions"


# -- extensions -----------------------------------------------------------------------------
def extensions() -> tuple[Extensions, list[str]]:
    charged: list[str] = []
    ext = Extensions(templates=TEMPLATES)

    async def billing(request: ExtensionRequest) -> dict[str, object]:
        total = (await request.inspector.queue("default")).total
        return {"total": total, "note": "<b>not markup</b>"}

    async def charge(request: ExtensionRequest) -> str:
        charged.append(request.form["amount"])
        return f"charged {request.form['amount']}"

    ext.register_page("/billing", "Billing", billing, template="billing.html", post=charge)

    @ext.page("/about", "About")
    async def about(request: ExtensionRequest) -> str:
        return "<script>plain text</script>"

    @ext.panel("queues", "Backlog by customer")
    async def backlog(request: ExtensionRequest) -> dict[str, int]:
        return {"acme": 12, "globex": 3}

    @ext.panel("queue", "Queue owner")
    async def owner(request: ExtensionRequest) -> str:
        return f"team of {request.params['name']}"

    @ext.panel("queues", "Broken")
    async def broken(request: ExtensionRequest) -> str:
        raise RuntimeError("billing API down")

    return ext, charged


async def test_an_app_adds_pages_and_panels(app: App) -> None:
    ext, charged = extensions()
    async with client(dashboard_app(app, extensions=ext)) as web:
        home = (await web.get("/")).text
        assert '<a href="/billing" >Billing</a>' in home or 'href="/billing"' in home
        assert "Backlog by customer" in home and "<th>acme</th><td>12</td>" in home
        assert "This panel failed: RuntimeError: billing API down" in home, "a panel's error"
        billing = await web.get("/billing")
        assert billing.status_code == 200
        total = (await app.inspector().queue("default")).total
        assert f'id="billing-total">Total: {total} &lt;b&gt;not markup&lt;/b&gt;' in billing.text
        assert "&lt;script&gt;plain text&lt;/script&gt;" in (await web.get("/about")).text
        queue = (await web.get("/queue", params={"name": "critical"})).text
        assert "team of critical" in queue and "Backlog by customer" not in queue
        posted = await web.post(
            "/billing",
            data={"csrf": csrf_of(billing.text), "amount": "10"},
            headers={"origin": ORIGIN},
        )
        assert posted.status_code == 303 and posted.headers["location"] == "/billing"
        assert "charged 10" in (await web.get("/billing")).text and charged == ["10"]
        refused = await web.post("/billing", data={"amount": "5"}, headers={"origin": ORIGIN})
        assert refused.status_code == 403 and charged == ["10"], "CSRF holds for app pages"
        assert (await web.post("/about", data={})).status_code == 405
        live = await web.get("/", headers={"x-chronos-live": "1"})
        assert "Backlog by customer" not in live.text, "a live re-read skips the panels"
    async with client(dashboard_app(app, extensions=ext, read_only=True)) as web:
        page = (await web.get("/billing")).text
        assert 'method="post"' not in page.split("</header>")[1], "the template hides its form"
        refused = await web.post(
            "/billing", data={"csrf": "x", "amount": "5"}, headers={"origin": ORIGIN}
        )
        assert refused.status_code == 403 and charged == ["10"]
    async with client(dashboard_app(app, extensions=ext, token="s3cret")) as web:
        assert (await web.get("/billing")).status_code == 401, "behind the same auth"


async def test_bad_extensions_are_refused_when_registered() -> None:
    ext = Extensions()

    async def handler(request: ExtensionRequest) -> str:
        return ""

    def plain(request: ExtensionRequest) -> str:
        return ""

    for path, says in [
        ("billing", "like '/billing'"),
        ("/Billing", "like '/billing'"),
        ("/queue", "the dashboard's own"),
        ("/workflows/x", "the dashboard's own"),
    ]:
        with pytest.raises(ValueError, match=says):
            ext.register_page(path, "T", handler)
    with pytest.raises(ValueError, match="must be an async function"):
        ext.register_page("/x", "X", plain)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs Extensions"):
        ext.register_page("/x", "X", handler, template="x.html")
    with pytest.raises(ValueError, match="a panel goes on"):
        ext.register_panel("jobs", "X", handler)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty text"):
        ext.register_page("/x", " ", handler)
    ext.register_page("/x", "X", handler)
    with pytest.raises(ValueError, match="registered already"):
        ext.register_page("/x", "X", handler)
    with pytest.raises(ValueError, match="no template"):
        Extensions(templates=TEMPLATES).register_page("/y", "Y", handler, template="nope.html")
    with pytest.raises(TypeError, match="extensions must be"):
        dashboard_app(App(MemoryStore()), extensions=[ext])  # type: ignore[arg-type]


async def test_a_worker_reports_the_kinds_it_handles(autojump_clock: object) -> None:
    import trio

    from tests.tests_app import make_app

    store = MemoryStore()
    app = make_app(None)
    app.use_store(store)
    async with app.open_worker(queues=["default"]):
        with trio.fail_after(10):
            while not await store.workers():
                await trio.sleep(0.1)
        [me] = await store.workers()
        assert me.kinds == tuple(sorted(app.tasks)), "every kind of the app's registry"
