"""The contestants of the SQLite benchmark (``benchmarks.sqlite``), one
module each: ``chronos`` (our SQLite store), and the peers ``huey_sqlite``
(huey's ``SqliteHuey``) and ``persistqueue`` (persist-queue's
``SQLiteAckQueue``).

Every peer runs from its own virtual environment (``benchmarks/.venv/PEER``,
made by ``python -m benchmarks --sqlite --setup-peers`` from
``benchmarks/peers/requirements-PEER.txt``), so what a module shares with
the driver uses the standard library, ``benchmarks._common`` and the system
itself.

A module gives what a PostgreSQL contestant gives
(``benchmarks.pg_systems``): ``BACKEND``, ``PACKAGES``, ``install(url)``, a
``Producer`` (``open``, ``close``, ``enqueue(job)``, ``enqueue_bulk(jobs)``,
``bulk``), ``worker_argv(python)``, ``run(fn, *args)`` and ``sleep(seconds)``,
where ``url`` is the run's fresh directory (each system keeps its file in
it). And, for the SQLite phases:

* ``Producer.fill(jobs)``: ``jobs`` stored before a drain, untimed, in as
  few transactions as the system allows (a peer without a batch call gets
  the very rows its enqueue call writes, in one transaction);
* ``DELAYED``: whether the system runs a job at a given time (the lateness
  phase skips it otherwise);
* ``RECOVERY``: how it gets back the jobs of a worker killed with SIGKILL,
  in a few words: ``lease`` (a lease expires and another worker takes the
  jobs), ``restart`` (a worker process opened after the kill resets the
  dead one's jobs: the harness starts one at once, as a process manager
  would), or ``none`` (the jobs are gone).

A job is a dict of ``sent_at``, ``due_at`` (0: now), ``hold`` (seconds the
handler sleeps on its first attempt, to keep its jobs while it is killed),
``tag`` (its stage, or its sequence number in the multi-process drain) and
``kind``: ``noop`` (the start recorded, nothing else) or ``io``: the start
recorded, then :data:`IO_WAIT` seconds of the system's own sleep
(``trio.sleep`` for ours, ``time.sleep`` in huey's and persist-queue's
worker threads), a handler doing a little I/O as users' handlers do.
"""

from __future__ import annotations

#: Peers (module ``benchmarks.sqlite_systems.NAME``, venv ``benchmarks/.venv/NAME``).
SQLITE_PEERS = ("huey_sqlite", "persistqueue")
#: The ``io`` handler's wait, seconds (every system alike).
IO_WAIT = 0.001
#: The job kinds.
KINDS = ("noop", "io")
