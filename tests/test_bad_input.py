"""Bad input gets a clear error that names the bad thing, and loses nothing
(issue 23, items 5 and 11, and the table in docs/bad-input.md).

The docs table is the test's data: every row there runs here and must raise
the exception it names with the text it quotes, so the table cannot drift
from the code. The rest covers what a table row cannot: that nothing is
stored, the producers outside Trio against a real Redis, a group built
without ``group()``, and the expiry text the Lua script writes."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import inspect
import math
import random
import re
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import chronos_trio
from chronos_trio import (
    App,
    ConcurrencyLimit,
    Group,
    JobContext,
    MemoryStore,
    RateLimit,
    Worker,
    chain,
    graph,
    group,
)
from chronos_trio.cli import main
from chronos_trio.dashboard import dashboard_app, serve_dashboard
from chronos_trio.producers import AsyncioProducer, SyncProducer
from chronos_trio.producers._common import PRODUCER_OPTIONS
from chronos_trio.records._control import expired_error
from chronos_trio.records._options import ENQUEUE_OPTIONS, JOB_DEFAULT_OPTIONS
from chronos_trio.runtime import WorkerConfig
from chronos_trio.store import open_store
from chronos_trio.store.postgres._url import _OPTIONS as POSTGRES_URL_OPTIONS
from chronos_trio.store.redis._connect import STORE_OPTIONS as REDIS_URL_OPTIONS
from chronos_trio.store.sqlite._url import _OPTIONS as SQLITE_URL_OPTIONS

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "bad-input.md"


@attrs.frozen
class Report:
    day: str


# -- the table in docs/bad-input.md ------------------------------------------------------
@attrs.frozen
class Row:
    section: str
    option: str
    call: str
    raises: str
    says: str

    def __str__(self) -> str:
        return f"{self.section}: {self.call}"


_CODE = re.compile(r"^`(.*)`$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _code(cell: str) -> str | None:
    m = _CODE.match(cell)
    return m.group(1) if m else None


def table_rows() -> tuple[list[Row], list[Row]]:
    """The page's Python rows (option, call, exception, text) and its
    command-line rows (command, exit code, text), by section."""
    python, cli = [], []
    section = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        cells = _cells(line)
        if len(cells) == 4 and (call := _code(cells[1])) and (raises := _code(cells[2])):
            says = _code(cells[3])
            assert says is not None, f"the text of {call!r} is not a code span"
            python.append(Row(section, cells[0].strip("`"), call, raises, says))
        elif len(cells) == 3 and (command := _code(cells[0])) and cells[1].isdigit():
            says = _code(cells[2])
            assert says is not None, f"the text of {command!r} is not a code span"
            cli.append(Row(section, "", command, cells[1], says))
    return python, cli


PYTHON_ROWS, CLI_ROWS = table_rows()


#: The rows that stand for every worker option of a kind (see below).
GENERIC_WORKER_ROWS = {"(a count)": "int", "(seconds)": "float"}


def _worker_kind(field: attrs.Attribute[Any]) -> str | None:
    """``int`` (a count) or ``float`` (seconds) for a worker option of that
    type (or that type or None), else None: an option of its own kind."""
    kind, _, rest = str(field.type).partition(" | ")
    return kind if kind in ("int", "float") and rest in ("", "None") else None


def test_the_table_has_a_row_for_every_option() -> None:
    """Every option of every call the page covers, read from the call's
    signature (or the worker's attrs fields, or a store URL's option
    names), by name: a new option must
    come with its row, and a call that takes ``**options`` or refuses
    unknown names has an "(a name)" row. A count or a duration of the
    worker is covered by the "(a count)" / "(seconds)" rows, which
    :func:`test_every_worker_count_and_duration_is_refused_by_name` holds
    for each of them."""
    named: dict[str, set[str]] = {}
    for row in PYTHON_ROWS:
        named.setdefault(row.section, set()).add(row.option)
    app = App(MemoryStore())

    @app.task("t")
    async def t(x: int) -> None: ...

    assert _params(SyncProducer.__init__) == _params(AsyncioProducer.__init__)
    worker_own = {f.name for f in attrs.fields(WorkerConfig) if _worker_kind(f) is None}
    surfaces = {
        "App options": _params(App.__init__),
        "Enqueue options": ENQUEUE_OPTIONS | _keyword_only(t.enqueue) | _keyword_only(app.enqueue),
        "Task options": _keyword_only(app.task) - {"kind"},
        "Schedule options": ((_keyword_only(app.every) | _keyword_only(app.cron)) - {"payload"})
        | JOB_DEFAULT_OPTIONS
        | {"interval", "spec"},
        "Workflow steps": _keyword_only(t.s),
        "Worker options": worker_own | set(GENERIC_WORKER_ROWS) | (_params(Worker) - {"app"}),
        "Dashboard options": _params(dashboard_app)
        | (_params(serve_dashboard) - {"app", "task_status"}),
        "Producer options": _params(SyncProducer.__init__),
        "Store URLs": set(REDIS_URL_OPTIONS) | POSTGRES_URL_OPTIONS | SQLITE_URL_OPTIONS,
    }
    missing = {
        section: sorted((options | {"(a name)"}) - named.get(section, set()))
        for section, options in surfaces.items()
    }
    assert not any(missing.values()), f"options without a row: {missing}"
    assert len(PYTHON_ROWS) > 140 and len(CLI_ROWS) >= 4


def test_every_worker_count_and_duration_is_refused_by_name() -> None:
    """What the "(a count)" and "(seconds)" rows say, for every worker
    option of that kind: the wrong type and a negative value are each a
    ValueError naming the option."""
    kinds = {f.name: kind for f in attrs.fields(WorkerConfig) if (kind := _worker_kind(f))}
    assert {"concurrency", "poll_interval", "dead_max_count"} <= kinds.keys()
    for name, kind in kinds.items():
        expected = "must be an int" if kind == "int" else "must be a number of seconds"
        with pytest.raises(ValueError, match=f"^{name} {expected}, got '4'"):
            WorkerConfig.build(**{name: "4"})
        with pytest.raises(ValueError, match=f"^{name} must be .*, got -1"):
            WorkerConfig.build(**{name: -1})


def _params(fn: Any) -> set[str]:
    """The names ``fn`` takes (not ``self``, not ``*args`` / ``**kwargs``)."""
    return {
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _keyword_only(fn: Any) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}


def _namespace(tmp: Path) -> dict[str, Any]:
    """What the page's calls see: a fresh app on the memory store with the
    ``report`` task of the page's example, the same task in an app on a
    SQLite store in ``tmp`` (opened only if a row uses it), and the names
    they use."""
    app = App(MemoryStore())
    on_sqlite = App(f"sqlite:///{tmp / 'jobs.db'}")

    @app.task("report", queue="reports")
    async def report(args: Report) -> int:
        return 1

    @on_sqlite.task("report", queue="reports")
    async def sqlite_report(args: Report) -> int:
        return 1

    return {
        "app": app,
        "report": report,
        "sqlite_report": sqlite_report,
        "Report": Report,
        "RateLimit": RateLimit,
        "ConcurrencyLimit": ConcurrencyLimit,
        "chain": chain,
        "graph": graph,
        "group": group,
        "datetime": datetime,
        "math": math,
        "open_store": open_store,
        "dashboard_app": dashboard_app,
        "serve_dashboard": serve_dashboard,
        "Worker": Worker,
        "App": App,
        "SyncProducer": SyncProducer,
        "AsyncioProducer": AsyncioProducer,
    }


def _exception_class(name: str) -> type[BaseException]:
    found = (
        getattr(builtins, name, None)
        or getattr(chronos_trio, name, None)
        or getattr(chronos_trio.store, name, None)
    )
    assert isinstance(found, type) and issubclass(found, BaseException), name
    return found


async def _run_row(row: Row, tmp: Path) -> None:
    """Run one row's call: it must raise its exception with its text, and
    nothing may be stored."""
    names = _namespace(tmp)
    exec(f"async def _row():\n    {row.call}\n", names)
    try:
        with pytest.raises(_exception_class(row.raises)) as caught:
            await names["_row"]()
        assert row.says in str(caught.value)
        app: App = names["app"]
        stats = await app.store.stats(["reports", "default"])
        assert sum(s.total for s in stats) == 0, "nothing was stored"
        assert app.schedules == [] or row.raises == "UnknownTask"
        if "sqlite_report" in row.call:
            on_sqlite = names["sqlite_report"].app.store
            assert sum(s.total for s in await on_sqlite.stats(["reports"])) == 0
    finally:
        await names["sqlite_report"].app.aclose()


@pytest.mark.parametrize("row", PYTHON_ROWS, ids=str)
async def test_each_row_of_the_table_raises_what_it_says(row: Row, tmp_path: Path) -> None:
    await _run_row(row, tmp_path)


_PRODUCER_ROWS = [row for row in PYTHON_ROWS if row.section == "Producer options"]


@pytest.mark.parametrize("row", _PRODUCER_ROWS, ids=str)
async def test_each_producer_row_holds_for_the_other_producer(row: Row, tmp_path: Path) -> None:
    """The producers share their options: each row of one, made with the
    other (its name swapped in the call and the text), raises the same."""
    swap = {"SyncProducer": "AsyncioProducer", "AsyncioProducer": "SyncProducer"}

    def swapped(text: str) -> str:
        return re.sub(r"\b(SyncProducer|AsyncioProducer)\b", lambda m: swap[m.group(1)], text)

    assert re.search(r"\b(SyncProducer|AsyncioProducer)\(", row.call), row.call
    await _run_row(attrs.evolve(row, call=swapped(row.call), says=swapped(row.says)), tmp_path)


def test_the_producer_options_listed_are_the_producers_parameters() -> None:
    """``PRODUCER_OPTIONS`` (the names an unknown-option error lists, kept
    by hand in producers/_common) is what both constructors take by name."""
    expected = PRODUCER_OPTIONS | {"url"}
    assert _params(SyncProducer.__init__) == expected
    assert _params(AsyncioProducer.__init__) == expected


async def test_a_cluster_option_is_taken_for_a_cluster_url() -> None:
    """The row above refuses ``read_from_replicas`` on ``redis://``: the
    option is checked against the client the URL needs, so a Cluster URL
    takes it (nothing connects until first use)."""
    url = "redis+cluster://localhost:1"
    SyncProducer(url, read_from_replicas=True).close()
    await AsyncioProducer(url, read_from_replicas=True).aclose()
    SyncProducer("redis://localhost:1/0", max_connections=3).close()


@pytest.mark.parametrize("row", CLI_ROWS, ids=str)
def test_each_command_line_row_exits_as_it_says(
    row: Row, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHRONOS_URL", raising=False)
    argv = shlex.split(row.call)
    assert argv[:3] == ["python", "-m", "chronos_trio"]
    assert main(argv[3:]) == int(row.raises)
    captured = capsys.readouterr()
    assert row.says in (captured.out if "--json" in argv else captured.err)
    assert len(captured.err.strip().splitlines()) == 1 and "Traceback" not in captured.err


# -- the options of one enqueue: refused before anything is stored ---------------------
async def test_a_misspelled_option_is_refused_and_nothing_is_stored(tmp_path: Path) -> None:
    """On main ``enqueue(P(1), dely=5)`` stored the job and it ran at once."""
    names = _namespace(tmp_path)
    app, report = names["app"], names["report"]
    for call in (
        report.enqueue(Report("mon"), dely=5),
        app.enqueue("report", Report("mon"), dely=5),
        app.enqueue("not.registered", {"a": 1}, dely=5),
    ):
        with pytest.raises(
            TypeError, match=r"unknown enqueue option 'dely' \(did you mean 'delay'\?\)"
        ):
            await call
    both = r"unknown enqueue options 'dely' \(did you mean 'delay'\?\), 'tmeout' \(did you"
    with pytest.raises(TypeError, match=both):
        report.new_job(Report("mon"), dely=5, tmeout=3)
    assert await app.store.queues() == []
    done = await report.enqueue(Report("mon"), delay=5, queue="reports", max_retries=1)
    assert done.created and done.queue == "reports"


async def test_a_producer_outside_trio_refuses_them_before_sending(redis_url: str) -> None:
    """``SyncProducer`` and ``AsyncioProducer`` (against a real Redis): a
    misspelled or empty option is refused, and no job reaches Redis."""
    app = App(redis_url)

    @app.task("report", queue="reports")
    async def report(args: Report, job: JobContext) -> None: ...

    def sync_side() -> list[str]:
        errors = []
        with SyncProducer(redis_url, app=app) as producer:
            task: Any
            for task in (report, "report", "elsewhere"):
                for options in ({"dely": 5}, {"queue": ""}, {"timeout": "5"}):
                    try:
                        producer.enqueue(task, Report("mon"), **options)  # type: ignore[arg-type]
                    except (TypeError, ValueError) as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")
        return errors

    async def asyncio_side() -> list[str]:
        errors = []
        producer = AsyncioProducer(redis_url, app=app)
        try:
            for options in ({"dely": 5}, {"queue": ""}):
                try:
                    await producer.enqueue("report", Report("mon"), **options)  # type: ignore[arg-type]
                except (TypeError, ValueError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            await producer.aclose()
        return errors

    with trio.fail_after(30):
        errors = await trio.to_thread.run_sync(sync_side)
        errors += await trio.to_thread.run_sync(lambda: asyncio.run(asyncio_side()))
    assert len(errors) == 11, errors
    assert sum("unknown enqueue option 'dely' (did you mean 'delay'?)" in e for e in errors) == 4
    assert sum("queue must be a non-empty string, got ''" in e for e in errors) == 4
    assert sum("timeout must be a finite number of seconds > 0, got '5'" in e for e in errors) == 3
    stats = await app.store.stats(["reports", "default"])
    assert sum(s.total for s in stats) == 0, "no job reached Redis"
    await app.aclose()


def test_a_group_built_directly_is_held_to_the_member_limit(tmp_path: Path) -> None:
    """``group()`` refuses 1,001 members (the table); a ``Group`` made
    without it is refused when the workflow starts (on main 5,000 were
    accepted, against docs/workflows.md)."""
    names = _namespace(tmp_path)
    step = names["report"].s(Report("mon"))
    group(*[step] * 1000)  # the limit itself is fine
    with pytest.raises(ValueError, match="a group has at most 1000 members, got 5000"):
        trio.run(names["app"].enqueue_workflow, Group((step,) * 5000))


# -- the expiry's text: one judgement in both stores -------------------------------------
def test_the_expiry_text_is_an_iso_time_in_utc() -> None:
    """On main: ``not started by 1796176436.169``."""
    assert expired_error(1_796_176_436.169) == (
        "expired: not started by 2026-12-02T01:53:56.169Z (its expires_at)"
    )
    assert expired_error(0.0) == "expired: not started by 1970-01-01T00:00:00.000Z (its expires_at)"


@pytest.mark.redis
def test_the_lease_script_writes_the_same_expiry_text(redis_url: str) -> None:
    """``iso_utc`` of lua/lease.lua against :func:`expired_error`, over
    leap days, month and year ends, the epoch's start and random times
    from 1900 to 2200, to the millisecond."""
    import redis as redis_py

    source = (ROOT / "chronos_trio/store/redis/lua/lease.lua").read_text()
    start = source.index("local function iso_utc(t)")
    body = source[start : source.index("\nend\n", start) + 5]
    client = redis_py.Redis.from_url(redis_url)
    script = client.register_script(
        body + "local out = {}\n"
        "for i, t in ipairs(ARGV) do out[i] = iso_utc(tonumber(t)) end\nreturn out\n"
    )
    fixed = [
        dt.datetime(y, m, d, 23, 59, 59, 999_000, tzinfo=dt.UTC).timestamp()
        for y, m, d in [(2024, 2, 29), (2023, 2, 28), (2000, 2, 29), (1999, 12, 31), (2100, 3, 1)]
    ] + [0.0, 0.0009, 59.9999, 951_782_400.0, -1.5, -2_208_988_800.0]
    rng = random.Random(23)
    times = fixed + [rng.uniform(-2_208_988_800, 7_258_118_400) for _ in range(2000)]
    got = [v.decode() for v in script(args=[repr(t) for t in times])]
    want = [expired_error(t).removeprefix("expired: not started by ").split(" ")[0] for t in times]
    assert got == want
    client.close()
