"""The command line on a private PostgreSQL: ``migrate`` (and ``--check``)
and ``demo --url``."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import trio

from chronos_trio.cli import EXIT_BAD_URL, EXIT_OK, EXIT_PENDING, EXIT_REFUSED, EXIT_USAGE, main
from chronos_trio.cli._demo import run_demo
from chronos_trio.store.postgres import latest_version

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parent.parent


def cli(*argv: str) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "chronos_trio", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


def versions(url: str, schema: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            f"SELECT version FROM {schema}.chronos_migrations ORDER BY 1"
        ).fetchall()
    return [int(r[0]) for r in rows]


def test_migrate_check_then_apply(postgres_url: str) -> None:
    url = f"{postgres_url}?schema=shop"
    latest = latest_version()
    code, out, err = cli("migrate", url, "--check")
    assert code == EXIT_PENDING, err
    assert f"schema 'shop' at version 0 of {latest}" in out
    assert "pending 0001_initial" in out
    code, out, err = cli("migrate", url, "--check", "--json")
    report = json.loads(out)
    assert code == EXIT_PENDING and report["version"] == 0
    assert [p["version"] for p in report["pending"]] == list(range(1, latest + 1))

    code, out, err = cli("migrate", url)
    assert code == EXIT_OK, err
    assert "applied 0001_initial" in out and "current" in out
    assert versions(postgres_url, "shop") == list(range(1, latest + 1))

    code, out, err = cli("migrate", url, "--check")
    assert code == EXIT_OK and "current" in out and "pending" not in out
    code, out, _ = cli("migrate", url)  # again: nothing to do
    assert code == EXIT_OK and "applied" not in out


def test_migrate_refuses_a_newer_schema_and_other_urls(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{postgres_url}?schema=future"
    assert cli("migrate", url)[0] == EXIT_OK
    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "INSERT INTO future.chronos_migrations (version, name) VALUES (%s, 'later')",
            (latest_version() + 1,),
        )
    code, _, err = cli("migrate", url, "--check")
    assert code == EXIT_REFUSED and "newer than this code" in err
    assert "Traceback" not in err

    code, _, err = cli("migrate", "redis://127.0.0.1:6379/0")
    assert code == EXIT_BAD_URL and "PostgreSQL stores" in err
    code, _, err = cli("migrate", f"{postgres_url}?schema=Bad-Name")
    assert code == EXIT_BAD_URL and "schema" in err
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    assert main(["migrate"]) == EXIT_USAGE


def test_migrate_reads_chronos_url(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHRONOS_URL", f"{postgres_url}?schema=from_env")
    assert main(["migrate"]) == EXIT_OK
    assert versions(postgres_url, "from_env")[-1] == latest_version()


async def test_demo_runs_on_postgresql(postgres_url: str) -> None:
    out = io.StringIO()
    with trio.fail_after(120):
        code = await run_demo(jobs=40, out=out, live=False, url=f"{postgres_url}?schema=demo")
    text = out.getvalue()
    assert code == 0, text
    assert "all jobs accounted for" in text and "dead       3" in text


def test_demo_command_line_on_postgresql(postgres_url: str) -> None:
    code, out, err = cli("demo", "--jobs", "20", "--no-live", "--url", postgres_url)
    assert code == EXIT_OK, err
    assert "all jobs accounted for" in out
