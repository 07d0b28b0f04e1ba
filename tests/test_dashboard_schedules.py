"""The dashboard's schedules page: code and stored schedules with their
next fires in their own zone beside UTC (across a DST change), and the
stored ones added, changed, paused, resumed and removed through forms
behind the confirmation, CSRF, same-origin and read-only rules."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from chronos_trio import App, MemoryStore
from chronos_trio.dashboard import ASGIApp, dashboard_app
from chronos_trio.store.sqlite import SqliteStore
from tests._dashboard import csrf_of, populate_dashboard
from tests.tests_app import Note

ORIGIN = "http://localhost"


@pytest.fixture(params=["memory", pytest.param("sqlite", marks=pytest.mark.sqlite)])
async def app(request: pytest.FixtureRequest) -> AsyncIterator[App]:
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


async def act(
    web: httpx.AsyncClient, action: str, query: dict[str, str], **fields: str
) -> tuple[httpx.Response, httpx.Response]:
    confirm = await web.get(f"/confirm/{action}", params=query)
    assert confirm.status_code == 200, confirm.text
    form = {"csrf": csrf_of(confirm.text), **fields}
    posted = await web.post(f"/actions/{action}", data=form, headers={"origin": ORIGIN})
    assert posted.status_code == 303, posted.text
    return posted, await web.get(posted.headers["location"])


async def test_add_change_pause_resume_remove_through_the_forms(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        page = (await web.get("/schedules")).text
        assert "/confirm/schedule-add" in page
        fields = {"task": "tests.note", "payload": '{"text": "hi"}', "tz": "Europe/Paris"}
        _, page_r = await act(web, "schedule-add", {}, schedule="paris", cron="0 9 * * *", **fields)
        page = page_r.text
        assert "schedule paris added" in page
        assert "<code>0 9 * * *</code>" in page and "Europe/Paris" in page
        assert "09:00 Europe/Paris (08:00 UTC)" in page or "09:00 Europe/Paris (07:00 UTC)" in page

        change = await web.get("/confirm/schedule-change", params={"schedule": "paris"})
        assert 'value="0 9 * * *"' in change.text and "Europe/Paris" in change.text
        _, page_r = await act(web, "schedule-change", {"schedule": "paris"}, schedule="paris",
                              task="tests.note", payload='{"text": "x"}', every="3600")  # fmt: skip
        assert "schedule paris changed" in page_r.text and "every 3600s" in page_r.text
        [entry] = await app.dynamic_schedules.list()
        assert entry.schedule is not None and entry.schedule.payload == b'{"text":"x"}'

        _, page_r = await act(web, "schedule-pause", {"schedule": "paris"}, schedule="paris")
        assert "schedule paris paused" in page_r.text and "/confirm/schedule-resume" in page_r.text
        assert (await app.dynamic_schedules.list())[0].paused
        _, page_r = await act(web, "schedule-resume", {"schedule": "paris"}, schedule="paris")
        assert not (await app.dynamic_schedules.list())[0].paused
        _, page_r = await act(web, "schedule-remove", {"schedule": "paris"}, schedule="paris")
        assert "schedule paris removed" in page_r.text
        assert await app.dynamic_schedules.list() == []


async def test_bad_input_is_an_error_page_and_stores_nothing(app: App) -> None:
    async with client(dashboard_app(app)) as web:
        confirm = await web.get("/confirm/schedule-add")
        token = csrf_of(confirm.text)
        base = {"csrf": token, "schedule": "s", "task": "tests.note", "payload": '{"text": "a"}'}
        for fields, status, text in [
            ({"cron": "99 * * * *"}, 400, "bad cron spec"),
            ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, 400, "unknown timezone"),
            ({"every": "0.1"}, 400, "at least 1"),
            ({"every": "60", "task": "tests.nope"}, 400, "does not register"),
            ({"every": "60", "payload": '{"txt": 1}'}, 400, "payload"),
            ({"every": "soon"}, 400, "every must be seconds"),
        ]:
            posted = await web.post("/actions/schedule-add", data={**base, **fields},
                                    headers={"origin": ORIGIN})  # fmt: skip
            assert posted.status_code == status and text in posted.text, (fields, posted.text)
        assert await app.dynamic_schedules.list() == []
        await app.dynamic_schedules.add("s", Note("a"), task="tests.note", every=60)
        posted = await web.post("/actions/schedule-add", data={**base, "every": "30"},
                                headers={"origin": ORIGIN})  # fmt: skip
        assert posted.status_code == 409 and "already stored" in posted.text
        posted = await web.post("/actions/schedule-pause", data={"csrf": token, "schedule": "x"},
                                headers={"origin": ORIGIN})  # fmt: skip
        assert posted.status_code == 404 and "no stored schedule" in posted.text


async def test_posts_need_csrf_same_origin_and_not_read_only(app: App) -> None:
    await app.dynamic_schedules.add("s", Note("a"), task="tests.note", every=60)
    async with client(dashboard_app(app)) as web:
        confirm = await web.get("/confirm/schedule-pause", params={"schedule": "s"})
        token = csrf_of(confirm.text)
        fields = {"schedule": "s"}
        bad = await web.post("/actions/schedule-pause", data={**fields, "csrf": token + "x"},
                             headers={"origin": ORIGIN})  # fmt: skip
        assert bad.status_code == 403
        cross = await web.post("/actions/schedule-pause", data={**fields, "csrf": token},
                               headers={"origin": "http://evil.example"})  # fmt: skip
        assert cross.status_code == 403
    async with client(dashboard_app(app, read_only=True)) as web:
        page = (await web.get("/schedules")).text
        assert "/confirm/schedule" not in page and 'method="post"' not in page
        assert (await web.get("/confirm/schedule-add")).status_code == 403
        posted = await web.post("/actions/schedule-remove",
                                data={"schedule": "s", "csrf": "whatever"},
                                headers={"origin": ORIGIN})  # fmt: skip
        assert posted.status_code == 403 and "read-only" in posted.text
    assert not (await app.dynamic_schedules.list())[0].paused, "nothing changed"


async def test_next_fires_in_the_zone_beside_utc_across_dst(app: App) -> None:
    # a New York schedule at 9:00 whose next fires straddle the March DST change
    app.cron("0 9 * * *", Note("ny"), task="tests.note", tz="America/New_York",
             schedule_id="ny")  # fmt: skip
    now = dt.datetime(2027, 3, 12, 15, 0, tzinfo=dt.UTC).timestamp()
    app.use_store(MemoryStore(clock=lambda: now))
    async with client(dashboard_app(app)) as web:
        page = (await web.get("/schedules")).text
    assert "2027-03-13 09:00 America/New_York (14:00 UTC)" in page  # EST, UTC-5
    assert "2027-03-14 09:00 America/New_York (13:00 UTC)" in page  # EDT from Mar 14
    assert "2027-03-15 09:00 America/New_York (13:00 UTC)" in page
