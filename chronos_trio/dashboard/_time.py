"""How the dashboard shows a time (issue 30 item 6): absolute in UTC beside
relative ("3m05s ago", "in 2h03m"), in a machine-readable ``<time
datetime=...>``; the page's script adds the browser's local time beside
each (``static/dashboard.js``), so without script UTC is still shown.

Times are the store's clock (epoch seconds); relative ones are from the
store's ``now`` when the page was rendered.
"""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup

from ..app._inspector import relative_text


def iso(ts: float | None) -> str:
    """Store-clock epoch seconds as ``2025-01-31 12:00:00Z`` (``-`` for None)."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def iso_attr(ts: float) -> str:
    """``ts`` as an RFC 3339 UTC time for ``<time datetime>`` (ms precision)."""
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def when(ts: float | None, now: float, *, relative: bool = True, text: str | None = None) -> Markup:
    """``ts`` as ``<time datetime="...">2025-01-31 12:00:00Z</time>`` followed
    by its relative text (``relative``): ``-`` for None. ``text``: what the
    tag shows instead of the UTC time (a schedule's own zone with UTC
    beside). Every part is escaped."""
    if ts is None:
        return Markup("-")
    shown = iso(ts) if text is None else text
    stamp = Markup('<time class="ts" datetime="{}">{}</time>').format(iso_attr(ts), shown)
    if not relative:
        return stamp
    return stamp + Markup(' <span class="rel">({})</span>').format(relative_text(ts, now))


__all__ = ["iso", "iso_attr", "when"]
