"""``python -m chronos_trio search`` and ``bulk`` (issue 30 items 1 and 2), on
the memory store and Redis (tests/test_cli.py's ``cli`` fixture and jobs)."""

from __future__ import annotations

import io

from chronos_trio.cli import EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from tests.test_cli import Cli, FakeTerminal, cli, rows

__all__ = ["cli"]


def test_search_filters_and_json(cli: Cli) -> None:
    dead = cli("search", args=("--state", "dead"))
    assert dead.code == EXIT_OK, dead.err
    assert sorted(r[1] for r in rows(dead.out)[1:]) == ["dead-1", "dead-2"]
    found = cli("search", args=("--error", "payloaderror", "--json")).json()
    assert [j["id"] for j in found["jobs"]] == ["dead-1"] and found["cursor"] is None
    by_worker = cli("search", args=("--worker", "testhost:4242:0", "--json")).json()
    assert {j["id"] for j in by_worker["jobs"]} == {"leased-1", "retry-1", "dead-1", "dead-2"}
    assert cli("search", args=("--payload", '"hi"', "--json")).json()["jobs"][0]["id"] == "note-1"
    due_later = cli("search", args=("--due-from", "30m", "--state", "scheduled", "--json")).json()
    assert [j["id"] for j in due_later["jobs"]] == ["scheduled-1"]
    # pages: --limit 2 then --cursor; every job once
    seen: list[str] = []
    cursor: list[str] = []
    for _ in range(20):
        page = cli("search", args=("--queue", "default", "--limit", "2", "--json", *cursor)).json()
        seen += [j["id"] for j in page["jobs"]]
        if page["cursor"] is None:
            break
        cursor = ["--cursor", page["cursor"]]
    assert len(seen) == len(set(seen)) == 7
    # bad input: one line, exit 2
    bad = cli("search", args=("--created-from", "yesterday-ish"))
    assert bad.code == EXIT_USAGE and "created_from: cannot read the time" in bad.err
    bad = cli("search", args=("--state", "sleeping"))
    assert bad.code == EXIT_USAGE and "unknown job state 'sleeping'" in bad.err
    assert cli("search", args=("--cursor", "garbage!")).code == EXIT_USAGE


def test_bulk_requeue_of_a_filter_states_the_count_and_needs_confirmation(cli: Cli) -> None:
    piped = cli("bulk", "requeue", args=("--state", "dead"), stdin=io.StringIO("y\n"))
    assert piped.code == EXIT_REFUSED
    assert "refusing to requeue 2 job(s) without confirmation" in piped.err
    declined = cli("bulk", "requeue", args=("--error", "skipretry"), stdin=FakeTerminal("n\n"))
    assert declined.code == EXIT_REFUSED and "requeue 1 job(s) matching" in declined.err
    done = cli("bulk", "requeue", args=("--error", "skipretry", "--yes", "--json")).json()
    assert done == {
        "action": "requeue", "stated": 1, "done": 1, "skipped": 0, "missing": 0, "flagged": 0
    }  # fmt: skip
    assert cli("job", args=("dead-2", "--json")).json()["state"] == "ready"
    assert cli("job", args=("dead-1", "--json")).json()["state"] == "dead"
    # named jobs: one not dead is skipped, one gone counted
    named = cli(
        "bulk", "requeue",
        args=("--job", "default:dead-1", "--job", "default:ready-1", "--job", "default:nope",
              "--yes", "--json"),
    ).json()  # fmt: skip
    assert (named["done"], named["skipped"], named["missing"]) == (1, 1, 1)
    both = cli("bulk", "delete", args=("--job", "default:x", "--kind", "k", "--yes"))
    assert both.code == EXIT_USAGE and "either --job or filters" in both.err


def test_bulk_delete_skips_the_leased_job(cli: Cli) -> None:
    out = cli("bulk", "delete", args=("--queue", "default", "--yes", "--json")).json()
    assert out["stated"] == 6 and out["done"] == 6, out  # every job of default but leased-1
    left = cli("search", args=("--queue", "default", "--json")).json()
    assert [j["id"] for j in left["jobs"]] == ["leased-1"]
