"""The dashboard's search page and bulk actions (issue 30 items 1 and 2),
driven with httpx in-process on the memory store and a SQLite file (the
``app``/``web`` fixtures and jobs of tests/test_dashboard.py): filters in the
URL, paging by cursor, one confirmation stating the count, selected rows
and every match in steps with a progress page, read-only mode (no
checkboxes or buttons, 403), and the CSRF/origin checks."""

from __future__ import annotations

import html as htmllib
import json
import re

import httpx
import pytest

from chronos_trio import App, JobState, QueueInfo
from chronos_trio.dashboard import dashboard_app
from tests._dashboard import XSS_ERROR
from tests.test_dashboard import ORIGIN, app, client, state, web

__all__ = ["app", "web"]


def ids_in(page: str) -> list[str]:
    return re.findall(r'<a href="[^"]*/job\?id=([^&"]+)&amp;queue=[^"]*"><code>', page)


def job_counts(infos: list[QueueInfo]) -> int:
    """Dead jobs in every queue."""
    return sum(i.counts[JobState.DEAD] for i in infos)


def form_fields(page: str, form_id: str | None = None) -> dict[str, str]:
    """The hidden inputs of the (first, or ``form_id``'s) POST form of ``page``."""
    if form_id is not None:
        page = page[page.index(f'id="{form_id}"') :]
    start = page.index('<form method="post"')
    body = page[start : page.index("</form>", start)]
    return {
        htmllib.unescape(n): htmllib.unescape(v)
        for n, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', body)
    }


async def test_search_filters_are_in_the_url_and_pages_follow_the_cursor(
    web: httpx.AsyncClient,
) -> None:
    page = await web.get("/search", params={"state": "dead"})
    assert page.status_code == 200, page.text
    assert sorted(ids_in(page.text)) == ["dead-1", "dead-2", "xss-1"]
    assert 'value="dead" id="f-state-dead" checked' in page.text, "the form shows the search"
    assert 'name="job"' in page.text and 'id="bulk-requeue"' in page.text
    # markup in an error is text
    found = await web.get("/search", params={"error": "onerror"})
    assert ids_in(found.text) == ["xss-1"]
    assert XSS_ERROR not in found.text and "&lt;img src=x onerror=" in found.text
    both = await web.get("/search", params=[("queue", "default"), ("error", "SKIPRETRY")])
    assert ids_in(both.text) == ["dead-2"]
    assert ids_in((await web.get("/search", params={"payload": '"hi"'})).text) == ["note-1"]
    by_worker = await web.get("/search", params={"worker": "w:1:0"})
    assert sorted(ids_in(by_worker.text)) == ["note-1", "xss-1"]
    due = await web.get("/search", params={"due_from": "30m", "state": "scheduled"})
    assert ids_in(due.text) == ["scheduled-1"]
    # pages of 2: "Next page" carries the filters and the cursor
    seen: list[str] = []
    url = "/search?queue=default&limit=2"
    for _ in range(10):
        got = await web.get(url)
        seen += ids_in(got.text)
        more = re.search(r'id="next-page" href="([^"]+)"', got.text)
        if more is None:
            break
        url = htmllib.unescape(more.group(1))
        assert "queue=default" in url and "cursor=" in url
    assert len(seen) == len(set(seen)) == 7
    # bad input: a clear 400, nothing else
    bad = await web.get("/search", params={"created_from": "someday"})
    assert bad.status_code == 400 and "created_from: cannot read the time" in bad.text
    bad = await web.get("/search", params={"state": "sleepy"})
    assert bad.status_code == 400 and "unknown job state" in bad.text
    assert (await web.get("/search", params={"cursor": "nope!"})).status_code == 400
    missing = await web.get("/search", params={"queue": "nope"})
    assert missing.status_code == 404 and "unknown queue" in missing.text


async def test_bulk_requeue_of_every_match_in_steps(
    app: App, web: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    confirm = await web.get(
        "/search/confirm", params={"action": "requeue", "scope": "all", "state": "dead"}
    )
    assert confirm.status_code == 200, confirm.text
    assert 'Requeue <strong id="count">3</strong> job(s) matching: state dead' in confirm.text
    fields = form_fields(confirm.text)
    assert fields["scope"] == "all" and fields["state"] == "dead" and fields["stated"] == "3"
    # one step per request: 2 jobs a step makes a progress page first
    monkeypatch.setattr("chronos_trio.dashboard._search.STEP", 2)
    posted = await web.post("/search/bulk", data=fields, headers={"origin": ORIGIN})
    assert posted.status_code == 200, posted.text
    assert 'data-autosubmit="1"' in posted.text and "2 done" in posted.text
    assert job_counts(await app.inspector().queues()) == 1, "one dead job left after a step"
    more = form_fields(posted.text)
    assert more["cursor"] and more["done"] == "2"
    last = await web.post("/search/bulk", data=more, headers={"origin": ORIGIN})
    assert last.status_code == 303
    shown = await web.get(last.headers["location"])
    assert "Requeue: 3 done, 0 skipped" in shown.text
    for job_id in ("dead-1", "dead-2", "xss-1"):
        assert await state(app, job_id) is JobState.READY


async def test_bulk_on_selected_rows_skips_what_it_does_not_apply_to(
    app: App, web: httpx.AsyncClient
) -> None:
    rows = [json.dumps(["default", "leased-1"]), json.dumps(["default", "ready-1"])]
    confirm = await web.get(
        "/search/confirm",
        params=[("action", "delete"), ("scope", "selected"), *(("job", r) for r in rows)],
    )
    assert confirm.status_code == 200, confirm.text
    assert 'the <strong id="count">2</strong> selected job(s)' in confirm.text
    fields = form_fields(confirm.text)
    assert json.loads(fields["jobs"]) == [["default", "leased-1"], ["default", "ready-1"]]
    posted = await web.post("/search/bulk", data=fields, headers={"origin": ORIGIN})
    assert posted.status_code == 303
    shown = await web.get(posted.headers["location"])
    assert "Delete: 1 done, 1 skipped" in shown.text
    assert await state(app, "ready-1") is None and await state(app, "leased-1") is JobState.LEASED
    # nothing selected and not "every match": a 400
    none = await web.get("/search/confirm", params={"action": "delete"})
    assert none.status_code == 400 and "select some rows" in none.text


async def test_bulk_posts_need_csrf_and_same_origin(app: App, web: httpx.AsyncClient) -> None:
    confirm = await web.get(
        "/search/confirm", params={"action": "delete", "scope": "all", "state": "dead"}
    )
    fields = form_fields(confirm.text)
    for data, headers in (
        (fields, {"origin": "http://evil.example"}),
        ({**fields, "csrf": "forged"}, {"origin": ORIGIN}),
        ({k: v for k, v in fields.items() if k != "csrf"}, {"origin": ORIGIN}),
    ):
        refused = await web.post("/search/bulk", data=data, headers=headers)
        assert refused.status_code == 403, refused.text
    assert await state(app, "dead-1") is JobState.DEAD


async def test_read_only_search_shows_no_bulk_actions_and_refuses_them(app: App) -> None:
    async with client(dashboard_app(app, read_only=True)) as web:
        page = await web.get("/search", params={"state": "dead"})
        assert page.status_code == 200
        assert sorted(ids_in(page.text)) == ["dead-1", "dead-2", "xss-1"], "search works"
        assert 'type="checkbox" name="job"' not in page.text and "select-all" not in page.text
        assert "bulk-requeue" not in page.text and "/search/confirm" not in page.text
        assert 'method="post"' not in page.text
        confirm = await web.get(
            "/search/confirm", params={"action": "requeue", "scope": "all", "state": "dead"}
        )
        assert confirm.status_code == 403
        posted = await web.post(
            "/search/bulk",
            data={"action": "requeue", "scope": "all", "state": "dead", "csrf": "x"},
            headers={"origin": ORIGIN},
        )
        assert posted.status_code == 403 and "read-only" in posted.text
    assert await state(app, "dead-1") is JobState.DEAD
