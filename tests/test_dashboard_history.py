"""The dashboard's history charts and times (issue 30 items 3 and 6), driven
with httpx in-process on the memory store: charts from the per-minute
aggregates on the queues and queue pages (per queue, and per kind on the
queue page) as inline SVG with a data table, the ``/charts`` fragment the
page's script reloads, the window links, a store without aggregates, and
every shown time as a ``<time datetime>`` beside its relative text.
The browser test (a chart with real data, read-only too) is in
tests/test_dashboard_browser.py."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from chronos_trio import App, Inspector, MemoryStore
from chronos_trio.dashboard import dashboard_app
from chronos_trio.dashboard._charts import history_of, slots_of
from chronos_trio.dashboard._time import iso_attr, when
from chronos_trio.records import KindCounts, MinuteCounts
from chronos_trio.records._aggregates import BUCKETS, bucket_of
from chronos_trio.testing import MinimalStore
from tests._dashboard import populate_dashboard

ORIGIN = "http://localhost"


def timed(seconds: float, n: int) -> tuple[int, ...]:
    h = [0] * BUCKETS
    h[bucket_of(seconds)] = n
    return tuple(h)


async def ran(store: MemoryStore) -> None:
    """What workers ran in the last minutes, as the aggregator adds it."""
    await store.add_aggregates(
        [
            KindCounts("default", "tests.record", 40, 2, 3, timed(0.03, 45)),
            KindCounts("default", "tests.note", 5, 0, 0, timed(2.0, 5)),
            KindCounts("critical", "tests.note", 7, 1, 0, timed(0.2, 8)),
        ],
        keep=86400,
    )


@pytest.fixture
async def app() -> AsyncIterator[App]:
    store = MemoryStore()
    app = await populate_dashboard(store)
    await ran(store)
    yield app


def client(app: App, **kw: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dashboard_app(app, **kw)),  # type: ignore[arg-type]
        base_url=ORIGIN,
    )


def bars(html: str, cls: str) -> int:
    return len(re.findall(rf'<rect class="bar {cls}"', html))


async def test_queues_page_charts_every_queue(app: App) -> None:
    async with client(app) as web:
        html = (await web.get("/")).text
    assert 'id="charts"' in html and 'data-charts="/charts?hours=3"' in html
    assert 'data-history="default"' in html and 'data-history="critical"' in html
    assert "45 succeeded · 2 failed · 3 retried" in html, "the default queue's totals"
    assert "7 succeeded · 1 failed · 0 retried" in html
    # one slot holds this minute: a bar of each outcome per queue that had it
    assert bars(html, "ok") == 2 and bars(html, "failed") == 2 and bars(html, "retried") == 1
    assert len(re.findall(r'<circle class="point p50"', html)) == 2
    assert len(re.findall(r'<circle class="point p99"', html)) == 2
    assert 'role="img"' in html and "<title id=" in html, "charts have an accessible name"
    assert '<details class="chart-data"><summary>Data table</summary>' in html
    for w in (1, 3, 6, 24):
        assert f'href="/?hours={w}"' in html


async def test_queue_page_charts_the_queue_and_each_kind(app: App) -> None:
    async with client(app) as web:
        html = (await web.get("/queue", params={"name": "default", "hours": "24"})).text
    assert "History, last 24 h" in html
    assert 'data-history="default"' in html
    assert 'data-history="default/tests.note"' in html
    assert 'data-history="default/tests.record"' in html
    assert 'data-history="critical"' not in html
    assert "per 15 min" in html
    assert 'data-charts="/charts?name=default&amp;hours=24"' in html
    # the data table: a row for the slot that ran, p50 of the 30 ms + 2 s runs
    assert re.search(r'<td class="num">45</td><td class="num">2</td><td class="num">3</td>', html)


async def test_charts_fragment_and_bad_windows(app: App) -> None:
    async with client(app) as web:
        frag = await web.get("/charts", params={"name": "default", "hours": "1"})
        assert frag.status_code == 200 and frag.headers["cache-control"] == "no-store"
        assert frag.text.lstrip().startswith('<section class="charts" id="charts"')
        assert "<html" not in frag.text and "History, last 1 h" in frag.text
        # a window not offered falls back to the default
        assert "History, last 3 h" in (await web.get("/charts", params={"hours": "7"})).text
        assert "History, last 3 h" in (await web.get("/", params={"hours": "x"})).text
        missing = await web.get("/charts", params={"name": "nope"})
        assert missing.status_code == 404


async def test_read_only_shows_charts_and_refuses_posts(app: App) -> None:
    async with client(app, read_only=True) as web:
        html = (await web.get("/queue", params={"name": "default"})).text
        assert bars(html, "ok") >= 1
        assert (await web.post("/charts", data={})).status_code in (403, 405)


async def test_a_store_without_aggregates_says_so() -> None:
    store = MemoryStore()
    app = await populate_dashboard(store)
    inspector = Inspector(store, app=app)

    class NoAggregates:  # only the admin reads the pages need
        def __getattr__(self, name: str) -> object:
            if name in ("aggregates", "add_aggregates"):
                raise AttributeError(name)
            return getattr(store, name)

    inspector.store = NoAggregates()  # type: ignore[assignment]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=dashboard_app(inspector)),  # type: ignore[arg-type]
        base_url=ORIGIN,
    ) as web:
        html = (await web.get("/")).text
    assert "keeps no per-minute aggregates" in html
    assert MinimalStore  # the core alone has no AggregatesRole either


def test_slots_sum_minutes_into_the_window() -> None:
    now = 1_800_000_000.0 + 30
    minute = int(now // 60) * 60
    rows = [
        MinuteCounts("q", "a", minute, 3, 0, 0, timed(0.03, 3)),
        MinuteCounts("q", "a", minute - 60, 1, 1, 0, timed(1.5, 2)),
        MinuteCounts("q", "a", minute - 4 * 3600, 99, 0, 0),  # before the window
    ]
    slots, step = slots_of(rows, now, 1)
    assert step == 1 and len(slots) == 60 and slots[-1].start == minute
    assert (slots[-1].succeeded, slots[-2].succeeded, slots[-2].failed) == (3, 1, 1)
    assert sum(s.total for s in slots) == 5
    p50 = slots[-1].p50
    assert p50 is not None and 0.02 <= p50 <= 0.05
    three, step3 = slots_of(rows, now, 3)
    assert step3 == 2 and len(three) == 90
    h = history_of(rows, now, 1, "q", None)
    assert len([s for s in h.throughput.shapes if "bar" in s.cls]) == 3
    assert all(0 <= s.y <= 120 and s.h >= 0 for s in h.throughput.shapes)
    assert h.latency.lines and h.latency.lines[0][0] == "line p50"


def test_times_are_time_tags_beside_relative_text() -> None:
    now = 1_800_000_000.0
    html = str(when(now - 185, now))
    assert html == (
        '<time class="ts" datetime="2027-01-15T07:56:55.000Z">2027-01-15 07:56:55Z</time>'
        ' <span class="rel">(3m05s ago)</span>'
    )
    assert "in 2h00m" in str(when(now + 7200, now))
    assert str(when(None, now)) == "-"
    assert iso_attr(0.25) == "1970-01-01T00:00:00.250Z"


async def test_every_page_shows_times_as_time_tags(app: App) -> None:
    async with client(app) as web:
        job = (await web.get("/job", params={"id": "dead-1", "queue": "default"})).text
        jobs = (await web.get("/jobs", params={"queue": "default", "state": "scheduled"})).text
    assert re.search(r'<time class="ts" datetime="\d{4}-\d\d-\d\dT[\d:.]+Z">', job)
    assert '<span class="rel">(' in job
    assert re.search(
        r'<td><time class="ts" datetime="[^"]+">[^<]+</time> <span class="rel">\(in ', jobs
    )


async def test_a_queue_that_ran_nothing_gets_a_line_not_empty_charts() -> None:
    store = MemoryStore()
    app = await populate_dashboard(store)
    await store.add_aggregates([KindCounts("critical", "tests.note", 1)], keep=86400)
    async with client(app) as web:
        html = (await web.get("/")).text
    default = html[html.index('data-history="default"') :]
    assert default.index("Nothing ran in the last 3 h.") < default.index("</div>")
    assert bars(html, "ok") == 1, "only the critical queue is drawn"
