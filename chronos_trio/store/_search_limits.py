"""The bounds of a job search (see :mod:`._search`), in a module of their
own: the role protocol and the stores name them in their signatures'
defaults, and a worker, which never searches, loads no more of search than
these two numbers."""

from __future__ import annotations

#: Records one search call reads at most, by default.
SCAN_LIMIT = 10_000
#: The most jobs one page may ask for.
MAX_PAGE = 1000
