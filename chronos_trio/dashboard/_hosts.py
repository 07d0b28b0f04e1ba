"""Which ``Host`` a request may name, and whose ``X-Forwarded-*`` to believe.

**The Host allow-list** stops DNS rebinding: a page on another site whose
name its owner re-points at 127.0.0.1 reaches a loopback dashboard from the
victim's browser, but the browser still sends that site's name as ``Host``.
A request is let in when its Host

- names an allowed host: ``localhost``, ``127.0.0.1`` and ``[::1]`` always,
  plus those given (``jobs.example.com``; ``jobs.example.com:8443`` for that
  port only; ``*.example.com`` for any subdomain; ``*`` turns the check off,
  for a proxy in front that checks Host itself); or
- is an IP address, the very address the connection arrived on (so a
  dashboard bound to ``0.0.0.0`` answers ``http://10.0.0.5:8080`` when that
  is this machine's address). A page of another site cannot make a browser
  send an IP address it does not itself stand at, so this lets in no
  rebinding.

**Forwarded headers** are believed only from the peers given
(``forwarded_allow_ips``: addresses or networks, ``*`` for any): their
``X-Forwarded-Proto`` sets the request's scheme (so the session cookie is
``Secure`` behind a TLS-terminating proxy) and their ``X-Forwarded-Host``
the host that is checked and that the Origin check compares against. Where
a header holds several comma-separated values, the last (the one the
trusted proxy added) counts. From any other peer they are ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, MutableMapping, Sequence
from typing import Any

import attrs

Scope = MutableMapping[str, Any]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Always allowed: the names a browser on this machine uses for it.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(text: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[v6]:port`` too) as (lower-case host, port or None);
    None when it is not a host at all (empty, spaces, a bad port)."""
    text = text.strip().lower()
    if not text or any(c.isspace() or c in "/\\@?#" for c in text):
        return None
    host, port = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
        if rest and not port:
            return None
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
        if not port:
            return None
    elif text.count(":") > 1:  # a bare IPv6 address: no port can follow
        host = f"[{text}]"
    if not host or host == "[]":
        return None
    if not port:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def _ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@attrs.frozen
class HostPolicy:
    """The allow-list and the trusted proxies (see the module docstring)."""

    #: (host, port or None for any) pairs; a host may start with ``*.``.
    hosts: tuple[tuple[str, int | None], ...]
    any_host: bool = False
    proxies: tuple[IPNetwork, ...] = ()
    any_proxy: bool = False

    @classmethod
    def make(
        cls, allowed_hosts: Iterable[str] = (), forwarded_allow_ips: Iterable[str] = ()
    ) -> HostPolicy:
        """The policy for these options; ``ValueError`` naming an entry that
        is neither a host[:port] nor ``*`` / an address or network."""
        hosts: list[tuple[str, int | None]] = []
        any_host = False
        for entry in (*LOOPBACK_HOSTS, *allowed_hosts):
            if entry.strip() == "*":
                any_host = True
                continue
            parsed = split_host(entry.removeprefix("*.")) if isinstance(entry, str) else None
            if parsed is None:
                raise ValueError(
                    f"allowed host {entry!r} is not a host name or address "
                    "(e.g. jobs.example.com, jobs.example.com:8443, *.example.com, 10.0.0.5)"
                )
            wild = "*." if entry.strip().lower().startswith("*.") else ""
            hosts.append((wild + parsed[0], parsed[1]))
        proxies: list[IPNetwork] = []
        any_proxy = False
        for entry in forwarded_allow_ips:
            for item in (part.strip() for part in str(entry).split(",")):
                if not item:
                    continue
                if item == "*":
                    any_proxy = True
                    continue
                try:
                    proxies.append(ipaddress.ip_network(item, strict=False))
                except ValueError:
                    raise ValueError(
                        f"forwarded-allow-ips entry {item!r} is not an IP address or network "
                        "(e.g. 127.0.0.1, 10.0.0.0/8, or *)"
                    ) from None
        return cls(tuple(hosts), any_host, tuple(proxies), any_proxy)

    # -- what a request says ----------------------------------------------------------
    def trusts(self, scope: Scope) -> bool:
        """Whether the request's peer is a proxy whose forwarded headers count."""
        if self.any_proxy:
            return True
        client = scope.get("client")
        ip = _ip_of(str(client[0])) if client else None
        return ip is not None and any(ip in net for net in self.proxies)

    def forwarded(self, scope: Scope) -> tuple[str | None, str | None]:
        """(scheme, host) a trusted proxy forwarded (each None if it did not)."""
        if not (self.any_proxy or self.proxies) or not self.trusts(scope):
            return None, None
        proto = _last(scope, b"x-forwarded-proto")
        scheme = proto.lower() if proto and proto.lower() in _DEFAULT_PORTS else None
        return scheme, _last(scope, b"x-forwarded-host")

    def allows(self, scope: Scope, host_header: str | None) -> bool:
        """Whether ``host_header`` (the request's effective Host) is allowed."""
        if self.any_host:
            return True
        parsed = split_host(host_header) if host_header is not None else None
        if parsed is None:
            return False
        host, port = parsed
        if port is None:
            port = _DEFAULT_PORTS.get(str(scope.get("scheme", "http")))
        for allowed, allowed_port in self.hosts:
            if allowed_port is not None and allowed_port != port:
                continue
            if allowed.startswith("*."):
                if host.endswith(allowed[1:]) and len(host) > len(allowed) - 1:
                    return True
            elif host == allowed:
                return True
        ip = _ip_of(host) if host[:1].isdigit() or host.startswith("[") else None
        server = scope.get("server")
        if ip is None or not server:
            return False
        return _ip_of(str(server[0])) == ip


def _last(scope: Scope, name: bytes) -> str | None:
    values = [
        part.strip()
        for key, value in scope.get("headers", ())
        if bytes(key).lower() == name
        for part in bytes(value).decode("latin-1").split(",")
    ]
    values = [v for v in values if v]
    return values[-1] if values else None


def host_headers(scope: Scope) -> Sequence[str]:
    """Every ``Host`` header of the request (a valid one has exactly one)."""
    return [
        bytes(value).decode("latin-1")
        for key, value in scope.get("headers", ())
        if bytes(key).lower() == b"host"
    ]


__all__ = ["LOOPBACK_HOSTS", "HostPolicy", "host_headers", "split_host"]
