"""The contestants of the PostgreSQL benchmark (``benchmarks.postgres``).

One module per system, run by ``benchmarks.pg_driver`` in that system's own
interpreter: ``chronos`` (ours, on our PostgreSQL store or our Redis store,
chosen by the URL) in the project's environment, and each peer in its own
virtual environment (``benchmarks/.venv/PEER``, made by
``python -m benchmarks --postgres --setup-peers`` from
``benchmarks/peers/requirements-PEER.txt``): their pins conflict with ours
and with each other's. Everything a module shares with the driver uses the
standard library, ``benchmarks._common`` and the system itself.

A module gives ``BACKEND`` (``asyncio`` or ``trio``), ``PACKAGES`` (whose
versions are reported), ``install(url)`` (its schema, not timed), a
``Producer`` (``open``, ``close``, ``enqueue(job)``, ``enqueue_bulk(jobs)``,
``bulk``: whether it has a batch call), ``worker_argv(python)`` (one worker
process, configured from the environment, see ``benchmarks._common``),
``run(fn, *args)`` and ``sleep(seconds)``. A job is a dict of ``sent_at``,
``due_at`` (0: now), ``hold`` (seconds the handler sleeps on its first
attempt, to hold its lease), ``tag`` (the stage it belongs to) and ``kind``
(``noop``, or ``query``: the handler makes one PostgreSQL query, ``SELECT 1``,
on a pool of its own, :data:`QUERY_POOL` connections, before it records);
the recovery phase's jobs also carry ``lease`` (for systems that set it per
job).
"""

from __future__ import annotations

#: Peers (module ``benchmarks.pg_systems.NAME``, venv ``benchmarks/.venv/NAME``).
PG_PEERS = ("procrastinate", "pgqueuer", "saq_pg", "oban")
#: The Python a peer needs when it is not the project's (oban 0.5 and later
#: require Python 3.12).
PEER_PYTHON = {"oban": "python3.12"}
#: Connections in the pool of a one-query handler (every system alike).
QUERY_POOL = 16
#: The job kinds.
KINDS = ("noop", "query")
