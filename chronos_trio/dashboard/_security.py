"""Who may see the dashboard and act through it: the guard around the app.

The guard is a plain ASGI middleware (it wraps streaming responses such as
the event stream without buffering them). For every HTTP request it

- checks the ``Host`` against the allow-list (``_hosts``: DNS rebinding),
  after taking the scheme and host a trusted proxy forwarded; any other
  Host is a 400 and nothing else runs;
- authenticates: with ``token``, an ``Authorization: Bearer`` header or the
  session cookie a ``?token=`` sign-in set; with ``basic_auth``, HTTP Basic
  credentials; else everyone is let in. A wrong or missing credential is a
  401 and nothing else runs;
- keeps a session: a signed cookie (HttpOnly, SameSite=Strict, Secure over
  HTTPS or when asked) holding a random session id and its expiry (signed
  with it: a session ends at ``max_age`` whatever the browser keeps), from
  which the CSRF token of the action forms is derived (so it is per session
  and never stored server-side);
- sets the security headers on every response: a strict
  Content-Security-Policy (scripts, styles and connections from the
  dashboard itself only, no inline code, no framing), X-Frame-Options,
  nosniff, a same-origin referrer policy and ``Cache-Control: no-store``.

Secrets are compared in constant time (``hmac.compare_digest``). The
signing key comes from the dashboard's secret (random unless given) and its
credentials, so a new token or password ends every session signed before.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import attrs
from markupsafe import escape

from ._hosts import HostPolicy, host_headers
from ._render import shorten

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SESSION_COOKIE = "chronos_dashboard_session"
#: Where the guard leaves the request's :class:`Session` in the ASGI scope.
SESSION_KEY = "chronos_trio.session"
#: Where the guard leaves whether this request's cookies get ``Secure``.
SECURE_KEY = "chronos_trio.secure_cookies"
#: How long a session lasts by default (seconds).
DEFAULT_SESSION_MAX_AGE = 12 * 3600.0
#: A secret given for signing must be at least this long (bytes).
MIN_SECRET_BYTES = 32
#: A sign-in target longer than this is not followed (the dashboard's root is).
MAX_TARGET = 2048

#: Nothing but the dashboard's own script, styles and event stream; no
#: inline script or style, no plugins, no framing, forms post only to itself.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    # same-origin: a Referer is sent to ourselves (the CSRF check may use
    # it) and never to another site
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)


@attrs.frozen
class Session:
    """One browser's session: ``sid`` is random, ``signed_in`` says whether
    it signed in with the token, ``csrf`` is the token its forms carry,
    ``expires`` the epoch second it ends."""

    sid: str
    signed_in: bool
    csrf: str
    expires: int


class Signer:
    """HMAC-SHA256 signatures with a secret key (random per dashboard unless
    one is given, so a restart signs every browser out)."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def mac(self, purpose: str, text: str) -> str:
        digest = hmac.new(self._secret, f"{purpose}\0{text}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")

    def sign(self, purpose: str, text: str) -> str:
        return f"{text}.{self.mac(purpose, text)}"

    def unsign(self, purpose: str, value: str) -> str | None:
        """The text ``value`` signs, or None when its signature is wrong."""
        text, dot, mac = value.rpartition(".")
        if not dot or not hmac.compare_digest(mac, self.mac(purpose, text)):
            return None
        return text


@attrs.frozen
class Credentials:
    """How requests authenticate: ``token``, ``basic`` (user, password), or
    neither (open: for a loopback port, or behind your own authentication)."""

    token: str | None = None
    basic: tuple[str, str] | None = None

    def __attrs_post_init__(self) -> None:
        if self.token is not None and self.basic is not None:
            raise ValueError("give a token or basic auth, not both")
        if self.token is not None and not self.token:
            raise ValueError("the dashboard token must not be empty")
        if self.basic is not None and (not self.basic[0] or not self.basic[1]):
            raise ValueError("basic auth needs a user and a password")


def signing_key(secret: bytes | str | None, credentials: Credentials) -> bytes:
    """The key the dashboard signs with: from ``secret`` (random when None;
    give every replica behind a load balancer the same one) and the
    credentials. ``ValueError`` if a given secret is shorter than
    :data:`MIN_SECRET_BYTES`."""
    if secret is None:
        raw = secrets.token_bytes(32)
    else:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(raw) < MIN_SECRET_BYTES:
            raise ValueError(
                f"the dashboard secret must be at least {MIN_SECRET_BYTES} bytes "
                f"(got {len(raw)}); make one with: openssl rand -hex 32"
            )
    if credentials.token is not None:
        bound = b"token\0" + credentials.token.encode()
    elif credentials.basic is not None:
        bound = b"basic\0" + "\0".join(credentials.basic).encode()
    else:
        bound = b"open"
    return hmac.new(raw, b"chronos_trio dashboard\0" + bound, hashlib.sha256).digest()


def parse_basic_auth(text: str) -> tuple[str, str]:
    """``USER:PASS`` as (user, password); ``ValueError`` if either is missing."""
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise ValueError("basic auth must be USER:PASS (both non-empty)")
    return user, password


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def cookies(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (header(scope, b"cookie") or "").split(";"):
        name, eq, value = part.strip().partition("=")
        if eq:
            out.setdefault(name, value)
    return out


def mount_path(scope: Scope) -> str:
    """Where the dashboard is mounted ('' at the root): links and cookies
    are made under it."""
    return str(scope.get("root_path", "")).rstrip("/")


def full_path(scope: Scope) -> str:
    """The request's path as the browser sees it (with the mount prefix:
    Starlette keeps it in ``path``, other servers may not)."""
    root, path = mount_path(scope), str(scope.get("path", "/"))
    return path if path.startswith(root + "/") or path == root else root + path


def logout_cookie(scope: Scope) -> str:
    """A ``Set-Cookie`` value that removes the session cookie from the browser."""
    secure = "; Secure" if scope.get(SECURE_KEY) else ""
    path = mount_path(scope) or "/"
    return f"{SESSION_COOKIE}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict{secure}"


def local_target(scope: Scope, query: str = "") -> str:
    """The request's own path (and ``query``) as a link that stays on this
    site: percent-encoded, starting with exactly one ``/``. A path a browser
    would read as another site (``//evil.example/x``; ``/\\evil.example``
    is encoded to stay a path) or an absurdly long one gives the
    dashboard's root instead."""
    path = quote(full_path(scope), safe="/:@!$&'()*+,;=-._~")
    target = path + (f"?{query}" if query else "")
    if not path.startswith("/") or path.startswith("//") or len(target) > MAX_TARGET:
        return mount_path(scope) + "/"
    return target


def same_origin(scope: Scope, allowed: Sequence[str]) -> bool:
    """Whether a state-changing request comes from a page of this dashboard:
    its Origin (else its Referer) names the host the request was sent to, or
    one of ``allowed`` (``https://admin.example.com``, for a dashboard behind a
    proxy that rewrites Host). Neither header, or ``Origin: null``: no."""
    source = header(scope, b"origin")
    if source == "null":  # a sandboxed or privacy-redirected page: not ours
        return False
    if source is None:
        source = header(scope, b"referer")
    if not source:
        return False
    parts = urlsplit(source)
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    if origin in (a.rstrip("/").lower() for a in allowed):
        return True
    host = (header(scope, b"host") or "").lower()
    return bool(host) and parts.netloc.lower() == host


class Guard:
    """The ASGI middleware described in the module docstring, around ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        credentials: Credentials,
        signer: Signer,
        hosts: HostPolicy,
        max_age: float = DEFAULT_SESSION_MAX_AGE,
        secure_cookies: bool = False,
        realm: str = "chronos_trio dashboard",
    ) -> None:
        if not (max_age > 0 and math.isfinite(max_age)):
            raise ValueError(f"session_max_age must be > 0 seconds, got {max_age}")
        self.app = app
        self.credentials = credentials
        self.signer = signer
        self.hosts = hosts
        self.max_age = max_age
        self.secure_cookies = secure_cookies
        self.realm = realm

    @staticmethod
    def clock() -> float:
        """Wall-clock epoch seconds (session expiry outlives a process and
        is shared by replicas, so it is never a monotonic clock)."""
        return time.time()

    # -- sessions ---------------------------------------------------------------
    def session(self, sid: str, signed_in: bool, expires: int) -> Session:
        return Session(sid, signed_in, self.signer.mac("csrf", sid), expires)

    def new_session(self, signed_in: bool) -> Session:
        expires = math.ceil(self.clock() + self.max_age)
        return self.session(secrets.token_urlsafe(18), signed_in, expires)

    def _from_cookie(self, scope: Scope) -> Session | None:
        """The session the cookie holds, or None when it is missing, forged
        or expired (its expiry is signed with it: a cookie a browser keeps
        too long, or a copy of one, is refused all the same)."""
        value = cookies(scope).get(SESSION_COOKIE)
        text = self.signer.unsign("session", value) if value else None
        if text is None:
            return None
        parts = text.split(":")
        if len(parts) != 3:
            return None
        sid, flag, expires = parts
        if not sid or not expires.isdigit() or int(expires) <= self.clock():
            return None
        return self.session(sid, flag == "1", int(expires))

    def _cookie(self, scope: Scope, session: Session) -> bytes:
        value = self.signer.sign(
            "session", f"{session.sid}:{int(session.signed_in)}:{session.expires}"
        )
        max_age = max(0, int(session.expires - self.clock()))
        secure = "; Secure" if scope.get(SECURE_KEY) else ""
        path = mount_path(scope) or "/"
        return (
            f"{SESSION_COOKIE}={value}; Path={path}; Max-Age={max_age}; HttpOnly; "
            f"SameSite=Strict{secure}"
        ).encode()

    # -- authentication ------------------------------------------------------------
    def _authorized(self, scope: Scope, session: Session | None) -> bool:
        creds = self.credentials
        auth = header(scope, b"authorization") or ""
        scheme, _, value = auth.partition(" ")
        if creds.token is not None:
            if scheme.lower() == "bearer" and _same(value.strip(), creds.token):
                return True
            return session is not None and session.signed_in
        if creds.basic is not None:
            if scheme.lower() != "basic":
                return False
            try:
                user, _, password = base64.b64decode(value.strip()).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            # both compared, always: no early exit that times the user name
            ok_user = _same(user, creds.basic[0])
            ok_password = _same(password, creds.basic[1])
            return ok_user and ok_password
        return True

    # -- the host ---------------------------------------------------------------------
    def _effective(self, scope: Scope) -> tuple[Scope, str | None]:
        """The scope as the browser sent it (scheme and Host a trusted proxy
        forwarded put in), and its one Host (None: missing or repeated)."""
        scheme, forwarded_host = self.hosts.forwarded(scope)
        inner = dict(scope)
        if scheme is not None:
            inner["scheme"] = scheme
        hosts = host_headers(scope)
        host = hosts[0] if len(hosts) == 1 else None
        if forwarded_host is not None:
            host = forwarded_host
            headers = [(k, v) for k, v in scope.get("headers", ()) if bytes(k).lower() != b"host"]
            inner["headers"] = [*headers, (b"host", forwarded_host.encode("latin-1"))]
        inner[SECURE_KEY] = self.secure_cookies or inner.get("scheme") == "https"
        return inner, host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websockets here
            await send({"type": "websocket.close", "code": 1008})
            return
        scope, host = self._effective(scope)
        if not self.hosts.allows(scope, host):
            await self._bad_host(send, host)
            return
        session = self._from_cookie(scope)
        set_cookie = session is None
        query = parse_qsl(bytes(scope.get("query_string", b"")).decode("latin-1"), True)
        given = [v for k, v in query if k == "token"]
        if self.credentials.token is not None and given:
            if not _same(given[-1], self.credentials.token):
                await self._unauthorized(scope, send, "wrong token")
                return
            # a fresh session id at sign-in (no session fixation)
            session = self.new_session(True)
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            await self._signed_in(scope, send, session, local_target(scope, rest))
            return
        if not self._authorized(scope, session):
            await self._unauthorized(scope, send, "sign in")
            return
        if session is None:
            session = self.new_session(False)
        inner = dict(scope)
        inner[SESSION_KEY] = session
        cookie = self._cookie(scope, session) if set_cookie else None

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                present = {bytes(k).lower() for k, _ in headers}
                headers += [(k, v) for k, v in SECURITY_HEADERS if k not in present]
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                if cookie is not None:
                    headers.append((b"set-cookie", cookie))
                message = dict(message)
                message["headers"] = headers
            await send(message)

        await self.app(inner, receive, send_with_headers)

    # -- the responses the guard gives itself ----------------------------------------
    async def _respond(
        self,
        send: Send,
        status: int,
        body: str,
        extra: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        headers = [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"cache-control", b"no-store"),
            *SECURITY_HEADERS,
            *extra,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body.encode()})

    async def _bad_host(self, send: Send, host: str | None) -> None:
        named = "A missing or repeated Host" if host is None else f"Host {shorten(host, 100)!r}"
        await self._respond(
            send,
            400,
            _page(
                "400 Bad Request",
                f"<p>{escape(named)} is not allowed here. Add the name this dashboard "
                "is reached by with <code>--allowed-host NAME</code> "
                "(<code>allowed_hosts=</code> of <code>dashboard_app</code>).</p>",
            ),
        )

    async def _unauthorized(self, scope: Scope, send: Send, why: str) -> None:
        extra: list[tuple[bytes, bytes]] = []
        if self.credentials.basic is not None:
            extra.append((b"www-authenticate", f'Basic realm="{self.realm}"'.encode()))
            hint = "This dashboard needs a user name and password."
        else:
            hint = (
                "This dashboard needs its token: send <code>Authorization: Bearer TOKEN</code>, "
                "or sign in below (the token is then kept in a session cookie)."
            )
        form = ""
        if self.credentials.token is not None:
            form = (
                f'<form method="get" action="{escape(local_target(scope))}">'
                '<label>Token <input type="password" name="token" autocomplete="off"></label> '
                '<button type="submit">Sign in</button></form>'
            )
        await self._respond(
            send,
            401,
            _page("401 Unauthorized", f"<p>{escape(why.capitalize())}. {hint}</p>{form}"),
            extra,
        )

    async def _signed_in(self, scope: Scope, send: Send, session: Session, target: str) -> None:
        # A page that moves on by itself rather than a redirect: a redirect
        # that a link from another site started would not carry the new
        # SameSite=Strict cookie; a navigation from our own page does.
        body = _page(
            "Signed in",
            f'<p>Signed in. <a href="{escape(target)}">Continue</a></p>',
            refresh=target,
        )
        await self._respond(send, 200, body, [(b"set-cookie", self._cookie(scope, session))])


def _page(title: str, body: str, *, refresh: str | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="0;url={escape(refresh)}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
        f"<title>{escape(title)}</title></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )


__all__ = [
    "CSP",
    "DEFAULT_SESSION_MAX_AGE",
    "MIN_SECRET_BYTES",
    "SECURE_KEY",
    "Credentials",
    "Guard",
    "Session",
    "Signer",
    "local_target",
    "logout_cookie",
    "parse_basic_auth",
    "same_origin",
    "signing_key",
]
