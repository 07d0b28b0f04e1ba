"""docs/stores.md's capabilities-by-backends table is the one the code
renders (``chronos_trio.testing.capability_table``), so it cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronos_trio.store import Capability
from chronos_trio.testing.capability_table import (
    BACKENDS,
    END,
    START,
    render_table,
    table_in,
    with_table,
)

PAGE = Path(__file__).resolve().parent.parent / "docs" / "stores.md"


def test_docs_stores_table_is_the_generated_one() -> None:
    page = PAGE.read_text()
    assert table_in(page) == render_table(), (
        "docs/stores.md's capability table differs from the code's; regenerate it with "
        "`python -m chronos_trio.testing.capability_table docs/stores.md`"
    )


def test_the_table_has_a_row_per_capability_and_a_column_per_backend() -> None:
    rows = render_table().splitlines()
    assert len(rows) == 2 + 1 + len(Capability) + 1  # header, rule, core, each, shared
    for cap in Capability:
        [row] = [r for r in rows if r.startswith(f"| `{cap.value}` |")]
        # memory and Redis have everything, PostgreSQL and SQLite all but
        # promotion (their claims judge due times), the minimal store nothing
        sql = "no" if cap is Capability.PROMOTION else "yes"
        assert row.endswith(f"| yes | yes | {sql} | {sql} | no |"), row
    assert all(r.count("|") == len(BACKENDS) + 3 for r in rows)


def test_regenerating_replaces_only_the_table() -> None:
    page = f"intro\n{START}\nstale\n{END}\noutro\n"
    fresh = with_table(page)
    assert fresh.startswith(f"intro\n{START}\n\n") and fresh.endswith(f"\n\n{END}\noutro\n")
    assert table_in(fresh) == render_table()
    with pytest.raises(ValueError, match="no"):
        table_in("a page without the markers")
