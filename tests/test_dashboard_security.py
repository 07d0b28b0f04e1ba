"""The dashboard's defences (issue 23, item 10), driven in-process with
httpx or with raw ASGI requests where httpx would tidy the request up: the
Host allow-list (DNS rebinding), forwarded headers from trusted proxies and
``Secure`` cookies, sign-in targets that stay on this site, sessions that end
at a signed expiry, sign-out, the signing secret replicas share, bounded
echoes of what a request carried, and the warning of an open dashboard;
then the ``dashboard`` command with those options, on Redis."""

from __future__ import annotations

import html
import logging
import os
import re
import subprocess
import sys
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from chronos_trio import App, JobState, MemoryStore
from chronos_trio.cli import EXIT_USAGE, main
from chronos_trio.dashboard import ASGIApp, _security, dashboard_app
from tests._dashboard import csrf_of, populate_dashboard

ORIGIN = "http://localhost"
SECRET = "0123456789abcdef0123456789abcdef"  # 32 bytes


@pytest.fixture
async def app() -> App:
    return await populate_dashboard(MemoryStore())


def client(asgi: ASGIApp, base_url: str = ORIGIN, **kw: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=base_url, **kw)


async def raw(
    asgi: ASGIApp,
    path: str = "/static/dashboard.css",
    *,
    query: str = "",
    headers: Sequence[tuple[str, str]] = (("host", "localhost"),),
    server: tuple[str, int] = ("127.0.0.1", 8080),
    client_addr: tuple[str, int] = ("127.0.0.1", 50000),
    scheme: str = "http",
) -> tuple[int, dict[str, list[str]], str]:
    """One GET through the ASGI app exactly as given (httpx would normalise
    the path and the Host): status, headers (lower-case name -> values), body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers],
        "client": client_addr,
        "server": server,
    }
    sent = False
    status = 0
    out: dict[str, list[str]] = {}
    body = b""

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        nonlocal status, body
        if message["type"] == "http.response.start":
            status = message["status"]
            for k, v in message["headers"]:
                out.setdefault(bytes(k).decode().lower(), []).append(bytes(v).decode())
        elif message["type"] == "http.response.body":
            body += message.get("body", b"")

    with trio.fail_after(10):
        await asgi(scope, receive, send)
    return status, out, body.decode()


def session_cookie(headers: dict[str, list[str]] | httpx.Headers) -> str:
    values = (
        headers.get_list("set-cookie")
        if isinstance(headers, httpx.Headers)
        else headers.get("set-cookie", [])
    )
    [cookie] = [c for c in values if c.startswith(_security.SESSION_COOKIE + "=")]
    return cookie


def cookie_value(cookie: str) -> str:
    return cookie.split(";", 1)[0].split("=", 1)[1]


async def state(app: App, job_id: str) -> JobState | None:
    job = await app.store.get_job(job_id)
    return None if job is None else job.state


# -- the Host allow-list ----------------------------------------------------------------
async def test_a_rebound_host_is_refused_before_any_handler_runs(app: App) -> None:
    """The reproduction: a page on rebind.evil.example, its name re-pointed
    at 127.0.0.1, drives an open dashboard from the victim's browser. Every
    request it can make (a page, the confirmation, the action) is a 400."""
    evil = "http://rebind.evil.example:8080"
    async with client(dashboard_app(app), base_url=evil) as web:
        page = await web.get("/")
        confirm = await web.get("/confirm/requeue", params={"id": "dead-1", "queue": "default"})
        token = csrf_of(confirm.text) if 'name="csrf"' in confirm.text else "x"
        posted = await web.post(
            "/actions/requeue",
            data={"id": "dead-1", "queue": "default", "csrf": token},
            headers={"origin": evil},
        )
        events = await web.get("/events")
    assert [r.status_code for r in (page, confirm, posted, events)] == [400] * 4
    assert await state(app, "dead-1") is JobState.DEAD, "nothing was requeued"
    assert "set-cookie" not in page.headers, "no session for a refused host"
    assert "rebind.evil.example:8080" in page.text and "--allowed-host" in page.text
    assert page.headers["content-security-policy"] == _security.CSP


HOST_CASES = [
    # (allowed_hosts, Host headers, the connection's local address, status)
    ((), ["localhost:8080"], "127.0.0.1", 200),
    ((), ["LOCALHOST"], "127.0.0.1", 200),
    ((), ["127.0.0.1:1234"], "127.0.0.1", 200),
    ((), ["[::1]:8080"], "::1", 200),
    ((), ["rebind.evil.example:8080"], "127.0.0.1", 400),
    ((), ["localhost.evil.example"], "127.0.0.1", 400),
    ((), ["localhost@evil.example"], "127.0.0.1", 400),
    ((), ["local host"], "127.0.0.1", 400),
    ((), [], "127.0.0.1", 400),
    ((), ["localhost", "rebind.evil.example"], "127.0.0.1", 400),
    # a 0.0.0.0 bind reached at one of this machine's addresses ...
    ((), ["10.0.0.5:8080"], "10.0.0.5", 200),
    # ... but not an address the connection did not arrive on
    ((), ["10.0.0.6:8080"], "10.0.0.5", 400),
    ((), ["jobs.example.com"], "10.0.0.5", 400),
    (("jobs.example.com",), ["JOBS.example.com"], "10.0.0.5", 200),
    (("jobs.example.com",), ["jobs.example.com:8080"], "10.0.0.5", 200),
    (("jobs.example.com:8443",), ["jobs.example.com:8443"], "10.0.0.5", 200),
    (("jobs.example.com:8443",), ["jobs.example.com"], "10.0.0.5", 400),
    (("jobs.example.com:80",), ["jobs.example.com"], "10.0.0.5", 200),
    (("*.example.com",), ["a.b.example.com"], "10.0.0.5", 200),
    (("*.example.com",), ["example.com"], "10.0.0.5", 400),
    (("*.example.com",), ["evilexample.com"], "10.0.0.5", 400),
    (("*",), ["anything.at.all"], "10.0.0.5", 200),
]


@pytest.mark.parametrize(("allowed", "hosts", "local", "status"), HOST_CASES)
async def test_host_allow_list(
    app: App, allowed: tuple[str, ...], hosts: list[str], local: str, status: int
) -> None:
    asgi = dashboard_app(app, allowed_hosts=allowed)
    got, _, _ = await raw(asgi, headers=[("host", h) for h in hosts], server=(local, 8080))
    assert got == status


async def test_bad_allow_list_entries_are_refused_by_name(app: App) -> None:
    for entry in ("http://jobs.example.com", "a b", "jobs.example.com:99999", ""):
        with pytest.raises(ValueError, match=re.escape(repr(entry))):
            dashboard_app(app, allowed_hosts=[entry])
    with pytest.raises(ValueError, match=r"'proxy\.local' is not an IP address"):
        dashboard_app(app, forwarded_allow_ips=["127.0.0.1, proxy.local"])


# -- forwarded headers and Secure cookies ---------------------------------------------
@pytest.mark.parametrize(
    ("options", "scheme", "secure"),
    [
        ({}, "http", False),
        ({}, "https", True),
        ({"secure_cookies": True}, "http", True),
        # X-Forwarded-Proto from a peer nobody said to trust: ignored
        ({"forwarded": True}, "http", False),
        ({"forwarded": True, "forwarded_allow_ips": ["10.0.0.0/8"]}, "http", False),
        # from a trusted proxy (this peer, 127.0.0.1): the request was HTTPS
        ({"forwarded": True, "forwarded_allow_ips": ["127.0.0.1"]}, "http", True),
        ({"forwarded": True, "forwarded_allow_ips": ["*"]}, "http", True),
    ],
)
async def test_the_session_cookie_is_secure_over_https(
    app: App, options: dict[str, Any], scheme: str, secure: bool
) -> None:
    options = dict(options)
    forwarded = options.pop("forwarded", False)
    headers = [("host", "localhost")]
    if forwarded:
        headers.append(("x-forwarded-proto", "http, https"))  # the proxy's value is last
    status, out, _ = await raw(dashboard_app(app, **options), "/", headers=headers, scheme=scheme)
    assert status == 200
    cookie = session_cookie(out)
    assert ("; Secure" in cookie) is secure, cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie


async def test_a_trusted_proxy_forwards_the_host_the_browser_used(app: App) -> None:
    """Behind a proxy that sends its own address as Host and the browser's
    in X-Forwarded-Host: that host is checked against the list, and the
    Origin check compares against it (no --allowed-origin needed)."""
    public = "https://jobs.example.com"
    via = {"x-forwarded-host": "jobs.example.com", "x-forwarded-proto": "https"}
    plain = dashboard_app(app, forwarded_allow_ips=["127.0.0.1"])
    async with client(plain, base_url="http://127.0.0.1:8080") as web:
        assert (await web.get("/", headers=via)).status_code == 400, "not on the list"
    asgi = dashboard_app(app, forwarded_allow_ips=["127.0.0.1"], allowed_hosts=["jobs.example.com"])
    async with client(asgi, base_url="http://127.0.0.1:8080") as web:
        confirm = await web.get("/confirm/pause", params={"queue": "default"}, headers=via)
        assert confirm.status_code == 200
        assert "; Secure" in session_cookie(confirm.headers)
        # httpx does not send a Secure cookie over http: hand it over
        cookie = f"{_security.SESSION_COOKIE}={cookie_value(session_cookie(confirm.headers))}"
        posted = await web.post(
            "/actions/pause",
            data={"csrf": csrf_of(confirm.text), "queue": "default"},
            headers={**via, "origin": public, "cookie": cookie},
        )
        assert posted.status_code == 303, posted.text
    assert (await app.inspector().queue("default")).paused


# -- sign-in targets ---------------------------------------------------------------------
def targets(html: str) -> list[str]:
    """Where a signed-in or 401 page sends the browser: refresh, links, form."""
    found = re.findall(r'url=([^"]*)"', html)
    found += re.findall(r'(?:href|action)="([^"]*)"', html)
    return [t.replace("&amp;", "&") for t in found]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("//evil.example/x", "/"),
        ("///evil.example/x", "/"),
        ("/\\evil.example/x", "/%5Cevil.example/x"),
        ("/\\/evil.example/x", "/%5C/evil.example/x"),
        ("/jobs", "/jobs"),
    ],
)
async def test_sign_in_never_leaves_the_site(app: App, path: str, expected: str) -> None:
    asgi = dashboard_app(app, token="tok")
    status, _, signed = await raw(asgi, path, query="token=tok&state=dead")
    assert status == 200 and "Signed in" in signed
    suffix = "" if expected == "/" else "?state=dead"
    assert set(targets(signed)) == {expected + suffix}, signed
    status, _, refused = await raw(asgi, path)  # the 401 page's sign-in form
    assert status == 401 and targets(refused) == [expected]


# -- sessions end ------------------------------------------------------------------------
async def test_a_session_ends_at_the_expiry_signed_into_its_cookie(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 hours by default: a copy of the cookie replayed later is refused
    (the browser would drop it at Max-Age; the server does not rely on that)."""
    import time

    asgi = dashboard_app(app, token="tok")
    now = time.time()
    status, out, _ = await raw(asgi, "/", query="token=tok")
    assert status == 200
    cookie = session_cookie(out)
    value = cookie_value(cookie)
    with_cookie = [("host", "localhost"), ("cookie", f"{_security.SESSION_COOKIE}={value}")]
    day = 12 * 3600
    for later, expected in ((0, 200), (day - 10, 200), (day + 10, 401)):
        fake = types.SimpleNamespace(time=lambda later=later: now + later)
        monkeypatch.setattr(_security, "time", fake, raising=False)
        assert (await raw(asgi, "/", headers=with_cookie))[0] == expected, later
    monkeypatch.undo()
    assert f"Max-Age={day};" in cookie
    # the expiry cannot be moved: it is signed with the session
    text, mac = value.rsplit(".", 1)
    sid, flag, expires = text.split(":")
    forged = f"{sid}:{flag}:{int(expires) + 10**6}.{mac}"
    headers = [("host", "localhost"), ("cookie", f"{_security.SESSION_COOKIE}={forged}")]
    assert (await raw(asgi, "/", headers=headers))[0] == 401
    # configurable
    status, out, _ = await raw(
        dashboard_app(app, token="tok", session_max_age=60), "/", query="token=tok"
    )
    assert "Max-Age=60;" in session_cookie(out)
    with pytest.raises(ValueError, match="session_max_age must be a finite number of seconds > 0"):
        dashboard_app(app, session_max_age=0)


# -- sign out ------------------------------------------------------------------------------
async def test_sign_out_ends_the_session(app: App) -> None:
    for read_only in (False, True):
        async with client(dashboard_app(app, token="tok", read_only=read_only)) as web:
            assert (await web.get("/", params={"token": "tok"})).status_code == 200
            page = await web.get("/")
            assert page.status_code == 200 and 'id="logout"' in page.text
            token = csrf_of(page.text)
            refused = [
                await web.post("/logout", data={"other": "1"}, headers={"origin": ORIGIN}),
                await web.post("/logout", data={"csrf": token + "x"}, headers={"origin": ORIGIN}),
                await web.post(
                    "/logout", data={"csrf": token}, headers={"origin": "https://evil.example"}
                ),
            ]
            assert [r.status_code for r in refused] == [403] * 3
            assert (await web.get("/logout")).status_code == 405
            assert (await web.get("/")).status_code == 200, "still signed in"
            out = await web.post("/logout", data={"csrf": token}, headers={"origin": ORIGIN})
            assert out.status_code == 303 and out.headers["location"] == "/"
            assert "Max-Age=0" in session_cookie(out.headers)
            assert (await web.get("/")).status_code == 401, "signed out"
    # without a token there is nothing to sign out of: no button
    async with client(dashboard_app(app)) as web:
        assert 'id="logout"' not in (await web.get("/")).text


# -- the signing secret ----------------------------------------------------------------
async def test_replicas_with_one_secret_share_sessions(app: App) -> None:
    def replica(**kw: Any) -> ASGIApp:
        return dashboard_app(app, **{"token": "tok", "secret": SECRET, **kw})

    status, out, _ = await raw(replica(), "/", query="token=tok")
    assert status == 200
    headers = [
        ("host", "localhost"),
        ("cookie", f"{_security.SESSION_COOKIE}={cookie_value(session_cookie(out))}"),
    ]
    assert (await raw(replica(), "/", headers=headers))[0] == 200, "another replica"
    assert (await raw(replica(secret=SECRET.encode()), "/", headers=headers))[0] == 200
    assert (await raw(replica(secret=SECRET[::-1]), "/", headers=headers))[0] == 401
    assert (await raw(replica(token="new"), "/", headers=headers))[0] == 401, (
        "a new token ends the sessions signed before"
    )
    assert (await raw(replica(secret=None), "/", headers=headers))[0] == 401, "random secret"
    with pytest.raises(ValueError, match="at least 32 bytes"):
        replica(secret="short")


# -- echoes are bounded -------------------------------------------------------------------
async def test_absurd_parameters_are_refused_and_echoes_bounded(app: App) -> None:
    long_id = "x" * 8000
    async with client(dashboard_app(app)) as web:
        for path, params in [
            ("/job", {"id": long_id}),
            ("/lookup", {"id": long_id}),
            ("/confirm/requeue", {"id": long_id, "queue": "default"}),
            ("/jobs", {"queue": "q" * 5000, "state": "dead"}),
            ("/jobs", {"queue": "default", "state": "dead", "offset": "9" * 5000}),
        ]:
            got = await web.get(path, params=params)
            assert got.status_code == 400, (path, got.status_code)
            assert "x" * 201 not in got.text and "q" * 201 not in got.text
            assert "9" * 41 not in got.text
        refused = await web.get("/job", params={"id": long_id})
        assert "parameter 'id' is too long (8000 characters; at most 200)" in html.unescape(
            refused.text
        )
        # a message that echoes a long (allowed) value is cut with an ellipsis
        unknown = await web.get("/queue", params={"name": "n" * 1000})
        assert unknown.status_code == 404
        [message] = map(html.unescape, re.findall(r'id="error-message">([^<]*)<', unknown.text))
        assert len(message) <= 500 and message.endswith("\u2026")
        action = await web.get("/confirm/" + "a" * 3000, params={"queue": "default"})
        assert action.status_code == 404 and "a" * 61 not in action.text


# -- the start-up warning -------------------------------------------------------------------
async def test_an_open_dashboard_warns(app: App, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chronos_trio.dashboard"):
        dashboard_app(app)
        dashboard_app(app, read_only=True)
        dashboard_app(app, token="tok")
        dashboard_app(app, basic_auth="ops:pw")
    warned = [r.getMessage() for r in caplog.records if r.name == "chronos_trio.dashboard"]
    assert len(warned) == 2, warned
    assert "without authentication" in warned[0] and "act on it" in warned[0]
    assert "act on it" not in warned[1], "read-only: it can only be seen"


# -- the command -----------------------------------------------------------------------------
def test_dashboard_command_refuses_bad_security_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["dashboard", "--url", "redis://127.0.0.1:1/0", "--port", "0"]
    for extra, error in [
        (["--secret", "short"], "at least 32 bytes"),
        (["--allowed-host", "a b"], "allowed host 'a b'"),
        (["--forwarded-allow-ips", "proxy.local"], "'proxy.local' is not an IP address"),
        (["--session-max-age", "0"], "expected seconds > 0"),
    ]:
        assert main([*base, *extra]) == EXIT_USAGE, extra
        assert error in capsys.readouterr().err


class Served:
    """``python -m chronos_trio dashboard ...`` in a subprocess: its base URL
    and the stderr lines it printed up to the one that says where it listens."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        env = {**os.environ, "PYTHONPATH": root, **env}
        env.pop("CHRONOS_URL", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chronos_trio", "dashboard", *argv],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.base = ""

    def wait_listening(self) -> None:
        assert self.proc.stderr is not None
        for _ in range(50):
            line = self.proc.stderr.readline()
            self.lines.append(line)
            if line.startswith("dashboard for"):
                self.base = line.rsplit(" on ", 1)[1].strip()
                return
        raise AssertionError("".join(self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def served() -> Iterator[list[Served]]:
    made: list[Served] = []
    yield made
    for s in made:
        s.stop()


@pytest.mark.redis
def test_dashboard_command_hosts_secret_and_warning(redis_url: str, served: list[Served]) -> None:
    """Two replicas sharing ``$CHRONOS_DASHBOARD_SECRET`` accept each
    other's sessions; a Host not on the list is a 400; a dashboard without
    a token says so at start."""
    trio.run(_fill, redis_url)
    shared = {"CHRONOS_DASHBOARD_TOKEN": "t0k", "CHRONOS_DASHBOARD_SECRET": SECRET}
    argv = ["--url", redis_url, "--port", "0", "--allowed-host", "jobs.example.com"]
    served += [Served(argv, shared), Served(argv, shared), Served([*argv, "--read-only"], {})]
    for s in served:
        s.wait_listening()
    one, two, open_one = served
    signed = httpx.get(one.base + "/?token=t0k", timeout=5)
    assert signed.status_code == 200 and "Signed in" in signed.text
    cookie = {_security.SESSION_COOKIE: signed.cookies[_security.SESSION_COOKIE]}
    page = httpx.get(two.base + "/", cookies=cookie, timeout=5)
    assert page.status_code == 200, "the other replica knows the session"
    assert 'data-queue="default" data-state="dead">2<' in page.text
    port = one.base.rsplit(":", 1)[1]
    for host, status in (("rebind.evil.example", 400), ("jobs.example.com", 200)):
        got = httpx.get(
            one.base + "/",
            headers={"host": f"{host}:{port}", "authorization": "Bearer t0k"},
            timeout=5,
        )
        assert got.status_code == status, host
    assert not any("without authentication" in line for line in one.lines)
    assert any("without authentication" in line for line in open_one.lines), open_one.lines
    assert httpx.get(open_one.base + "/", timeout=5).status_code == 200


async def _fill(redis_url: str) -> None:
    from chronos_trio.store.redis import RedisStore

    store = RedisStore.from_url(redis_url)
    try:
        await populate_dashboard(store)
    finally:
        await store.aclose()
