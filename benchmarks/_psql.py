"""PostgreSQL from any benchmark process through ``psql`` (standard library only).

The PostgreSQL driver runs in every contestant's own interpreter, whose
database client differs (psycopg, asyncpg) or is missing: what it reads from
the server (statement counts, transactions, dead tuples) and the snapshot it
pins go through the server's own ``psql`` binary, whose path the
orchestrator passes (``--psql``). Every call is one short-lived connection,
its own statements left out of the counts it reads.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

#: Statements of ours (and of psql itself) left out of statement counts.
OWN = ("pg_stat", "pg_database", "txid_current", "pg_class", "pg_backend_pid")


def query(psql: str, url: str, sql: str, timeout: float = 30.0) -> list[list[str]]:
    """Rows of ``sql`` (one statement), each a list of text fields."""
    done = subprocess.run(
        [psql, "-X", "-q", "-A", "-t", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"psql failed: {done.stderr.strip()[-300:]}")
    return [line.split("\t") for line in done.stdout.splitlines() if line]


def _own_filter() -> str:
    return " AND ".join(f"query NOT ILIKE '%{word}%'" for word in OWN)


def statement_counts(psql: str, url: str) -> dict[str, int]:
    """Calls per normalised statement in this database (``pg_stat_statements``;
    utility statements such as BEGIN, COMMIT and LISTEN are not tracked)."""
    rows = query(
        psql,
        url,
        "SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() AND "
        + _own_filter(),
    )
    out: dict[str, int] = {}
    for text, calls in rows:
        out[text] = out.get(text, 0) + int(calls)
    return out


def statement_times(psql: str, url: str) -> dict[str, tuple[int, float]]:
    """(calls, total execution ms) per normalised statement of this database."""
    rows = query(
        psql,
        url,
        "SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time "
        "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
        "WHERE d.datname = current_database() AND " + _own_filter(),
    )
    out: dict[str, tuple[int, float]] = {}
    for text, calls, ms in rows:
        before = out.get(text, (0, 0.0))
        out[text] = (before[0] + int(calls), before[1] + float(ms))
    return out


def costliest(
    before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]], top: int = 3
) -> list[list[Any]]:
    """The ``top`` statements by execution time between two
    :func:`statement_times`: [total ms, calls, mean ms, text]."""
    rows = []
    for text, (calls, ms) in after.items():
        c0, ms0 = before.get(text, (0, 0.0))
        if calls > c0:
            rows.append(
                [round(ms - ms0, 1), calls - c0, round((ms - ms0) / (calls - c0), 3), text[:120]]
            )
    return sorted(rows, key=lambda r: -r[0])[:top]


def transactions(psql: str, url: str) -> int:
    """Commits and rollbacks of this database so far (``pg_stat_database``;
    each backend reports them at most once a second, idle ones within 10 s)."""
    rows = query(
        psql,
        url,
        "SELECT xact_commit + xact_rollback FROM pg_stat_database "
        "WHERE datname = current_database()",
    )
    return int(rows[0][0])


def table_health(psql: str, url: str) -> dict[str, int]:
    """Live and dead tuples of every user table of this database, summed."""
    rows = query(
        psql,
        url,
        "SELECT coalesce(sum(n_live_tup), 0), coalesce(sum(n_dead_tup), 0) "
        "FROM pg_stat_user_tables",
    )
    return {"live_tuples": int(rows[0][0]), "dead_tuples": int(rows[0][1])}


class IdleMeter:
    """Statements and transactions of one database over a window: what an idle
    worker costs the server."""

    def __init__(self, psql: str, url: str) -> None:
        self.psql, self.url = psql, url
        self._statements = statement_counts(psql, url)
        self._xacts = transactions(psql, url)
        self._t = time.monotonic()

    def read(self) -> dict[str, Any]:
        seconds = time.monotonic() - self._t
        statements = statement_counts(self.psql, self.url)
        # our own reads in between: the two transaction counts and two
        # statement reads of this meter (each one transaction of psql's)
        xacts = transactions(self.psql, self.url) - self._xacts - 3
        delta = {k: v - self._statements.get(k, 0) for k, v in statements.items()}
        delta = {k: v for k, v in delta.items() if v > 0}
        total = sum(delta.values())
        top = sorted(delta.items(), key=lambda kv: -kv[1])[:6]
        return {
            "queries_per_s": total / seconds,
            "xacts_per_s": max(0, xacts) / seconds,
            "seconds": seconds,
            "top_statements": [[calls, text[:100]] for text, calls in top],
        }


class SnapshotPin:
    """A ``psql`` session holding a REPEATABLE READ transaction whose snapshot
    is taken at once: the database's xmin horizon stays where it is (no dead
    row newer than it can be vacuumed) until :meth:`release`."""

    def __init__(self, psql: str, url: str) -> None:
        self._psql_path, self._url = psql, url
        self._proc = subprocess.Popen(
            [psql, "-X", "-q", "-d", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdin is not None
        self._proc.stdin.write(
            "BEGIN ISOLATION LEVEL REPEATABLE READ;\n"
            "SELECT count(*) FROM pg_class;\n"  # the snapshot is taken here
        )
        self._proc.stdin.flush()
        deadline = time.monotonic() + 10
        while not self.pinned():
            if time.monotonic() > deadline:
                self.release()
                raise RuntimeError("the snapshot pin did not start")
            time.sleep(0.05)

    def pinned(self) -> bool:
        rows = query(
            self._psql_path,
            self._url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'idle in transaction' AND backend_xmin IS NOT NULL",
        )
        return int(rows[0][0]) > 0

    def release(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write("COMMIT;\n")
                self._proc.stdin.close()
                self._proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
