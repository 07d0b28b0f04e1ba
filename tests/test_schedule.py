"""Schedule: validation, stable IDs, trigger arithmetic (DST included) and
misfire planning. Pure functions: no worker, no store."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chronos_trio import App, JobContext, PayloadError, Schedule, UnknownTask
from chronos_trio.runtime import trigger_job_id

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")


@attrs.frozen
class Digest:
    to: str


@attrs.frozen
class Other:
    n: int


def make_app() -> App:
    app = App()

    @app.task("digest", queue="mail", max_retries=7, timeout=12)
    async def digest(args: Digest, job: JobContext) -> None: ...

    @app.task("raw")
    async def raw(args: bytes, job: JobContext) -> None: ...

    return app


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC).timestamp()


def local(t: float, tz: ZoneInfo = BERLIN) -> str:
    return dt.datetime.fromtimestamp(t, tz).strftime("%m-%d %H:%M%z")


def run_of(schedule: Schedule, start: float, count: int) -> list[float]:
    out, t = [], start
    for _ in range(count):
        t = schedule.next_after(t)
        out.append(t)
    return out


# -- registration ---------------------------------------------------------------------
def test_cron_registration_resolves_task_and_encodes_payload() -> None:
    app = make_app()
    s = app.cron("*/5  * * * *", Digest("ops"), tz="Europe/Berlin")
    assert app.schedules == [s]
    assert s.kind == "digest" and s.cron == "*/5 * * * *" and s.tz == "Europe/Berlin"
    assert s.payload == b'{"to":"ops"}' and s.misfire == "skip"
    job = s.new_job(utc(2025, 1, 1, 0, 5), app.tasks["digest"])
    assert (job.queue, job.max_retries, job.timeout) == ("mail", 7, 12)
    assert job.id == f"sched:{s.id}:{round(utc(2025, 1, 1, 0, 5) * 1000)}"
    assert job.run_at == utc(2025, 1, 1, 0, 5)


def test_every_with_kind_string_timedelta_and_overrides() -> None:
    app = make_app()
    s = app.every(
        dt.timedelta(minutes=2),
        b"blob",
        task="raw",
        queue="low",
        max_retries=0,
        timeout=3,
        misfire="fire_once",
        schedule_id="nightly-blob",
    )
    assert (s.interval, s.id, s.misfire, s.spec) == (
        120.0,
        "nightly-blob",
        "fire_once",
        "every 120s",
    )
    job = s.new_job(240.0, app.tasks["raw"])
    assert (job.queue, job.max_retries, job.timeout, job.payload) == ("low", 0, 3, b"blob")
    assert job.id == "sched:nightly-blob:240000"


def test_schedule_for_an_unregistered_kind_uses_defaults() -> None:
    app = App()
    s = app.every(60, {"a": 1}, task="elsewhere.handled", external=True)
    job = s.new_job(60.0)
    assert (job.kind, job.queue, job.payload) == ("elsewhere.handled", "default", b'{"a":1}')
    assert s.external
    app.registry.check_schedules()  # another program registers it: fine


def test_a_schedule_naming_an_unknown_task_cannot_be_run() -> None:
    """Declared first, it is accepted (its task may be registered after
    it); a worker then refuses it, with the closest registered kind (issue
    23, item 6: on main it fired a dead job each time, for ever)."""
    app = make_app()
    app.every(60, Digest("x"), task="digets")
    with pytest.raises(UnknownTask) as caught:
        app.registry.check_schedules()
    assert (
        "names task 'digets', which this app does not register "
        "(did you mean 'digest'? registered: digest, raw)"
    ) in str(caught.value)
    assert "external=True" in str(caught.value)


def test_a_task_registered_after_its_schedule_must_take_its_payload() -> None:
    app = App()
    app.every(60, "not bytes", task="late")  # encoded as JSON: no task known yet
    with pytest.raises(UnknownTask):
        app.registry.check_schedules()

    @app.task("late")
    async def late(args: int, job: JobContext) -> None: ...

    with pytest.raises(PayloadError, match=r"schedule 'late:[0-9a-f]+': .*int"):
        app.registry.check_schedules()


def test_ids_are_stable_across_processes_and_differ_by_content() -> None:
    a, b = make_app(), make_app()
    assert a.cron("0 * * * *", Digest("x")).id == b.cron("0 * * * *", Digest("x")).id
    ids = {
        a.cron("0 * * * *", Digest("y")).id,
        a.cron("0 * * * *", Digest("x"), tz="Europe/Berlin").id,
        a.cron("1 * * * *", Digest("x")).id,
        a.every(60, Digest("x")).id,
        a.every(61, Digest("x")).id,
    }
    assert len(ids) == 5 and all(i.startswith("digest:") for i in ids)
    assert trigger_job_id("s", 1.001) == "sched:s:1001"  # no float truncation


def test_macros_are_expanded() -> None:
    s = make_app().cron("@hourly", Digest("x"))
    assert s.cron == "0 * * * *"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda app: app.cron("*/5 * * *", Digest("x")), "expected 5 fields"),
        (lambda app: app.cron("0 0 * * * *", Digest("x")), "expected 5 fields"),
        (lambda app: app.cron("61 * * * *", Digest("x")), "bad cron spec"),
        (lambda app: app.cron("a b c d e", Digest("x")), "bad cron spec"),
        (lambda app: app.cron("0 0 31 2 *", Digest("x")), "never fires"),
        (lambda app: app.cron("* * * * *", Digest("x"), tz="Mars/Olympus"), "unknown timezone"),
        (lambda app: app.cron("* * * * *", Digest("x"), misfire="later"), "misfire policy"),
        (lambda app: app.every(0.5, Digest("x")), "at least 1 second"),
        (lambda app: app.every(dt.timedelta(0), Digest("x")), "at least 1 second"),
        (lambda app: app.every(float("inf"), Digest("x")), "at least 1 second"),
        (lambda app: app.every(60, Digest("x"), timeout=0), "timeout"),
        (lambda app: app.every(60, Digest("x"), max_retries=-1), "max_retries"),
        (lambda app: app.every(60, Digest("x"), schedule_id="has space"), "bad schedule id"),
        (lambda app: app.every(60, Digest("x"), queue=""), "queue"),
    ],
)
def test_bad_schedules_fail_at_registration(call: object, match: str) -> None:
    app = make_app()
    with pytest.raises(ValueError, match=match):
        call(app)  # type: ignore[operator]
    assert app.schedules == []


def test_payload_must_fit_the_task() -> None:
    app = make_app()
    with pytest.raises(PayloadError, match="expected a Digest payload"):
        app.every(60, Other(1), task="digest")
    with pytest.raises(UnknownTask, match="pass task="):
        app.every(60, Other(1))  # no task takes Other


def test_duplicate_schedule_needs_an_explicit_id() -> None:
    app = make_app()
    app.every(60, Digest("x"))
    with pytest.raises(ValueError, match="already registered"):
        app.every(60, Digest("x"))
    app.every(60, Digest("x"), schedule_id="second")
    assert len(app.schedules) == 2


# -- intervals ------------------------------------------------------------------------
def test_interval_triggers_are_epoch_aligned() -> None:
    s = make_app().every(10, Digest("x"))
    assert run_of(s, 1_000_003.5, 3) == [1_000_010.0, 1_000_020.0, 1_000_030.0]
    assert s.next_after(1_000_010.0) == 1_000_020.0  # strictly after
    assert s.latest_at_or_before(1_000_010.0) == 1_000_010.0
    assert s.latest_at_or_before(1_000_019.999) == 1_000_010.0


@settings(max_examples=300, deadline=None)
@given(
    ms=st.integers(min_value=1000, max_value=10**8),
    t=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_interval_arithmetic_is_consistent(ms: int, t: float) -> None:
    s = Schedule.build("k", b"", interval=ms / 1000)
    nxt = s.next_after(t)
    prev = s.latest_at_or_before(t)
    assert prev is not None and prev <= t < nxt
    assert s.next_after(prev) == nxt
    assert s.latest_at_or_before(nxt) == nxt
    assert round(nxt * 1000) % ms == 0


# -- cron and DST ----------------------------------------------------------------------
def test_cron_in_utc() -> None:
    s = make_app().cron("*/15 9-10 * * 1-5", Digest("x"))
    start = utc(2025, 6, 6, 10, 40)  # a Friday
    assert [local(t, ZoneInfo("UTC")) for t in run_of(s, start, 3)] == [
        "06-06 10:45+0000",
        "06-09 09:00+0000",
        "06-09 09:15+0000",
    ]


def test_spring_forward_fixed_time_fires_once_after_the_gap() -> None:
    # 2025-03-30: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 never exists.
    s = make_app().cron("30 2 * * *", Digest("x"), tz="Europe/Berlin")
    fires = run_of(s, utc(2025, 3, 28, 12), 4)
    assert fires == [utc(2025, 3, 29, 1, 30), utc(2025, 3, 30, 1, 0), utc(2025, 3, 31, 0, 30),
                     utc(2025, 4, 1, 0, 30)]  # fmt: skip
    assert [local(t) for t in fires] == [
        "03-29 02:30+0100",
        "03-30 03:00+0200",
        "03-31 02:30+0200",
        "04-01 02:30+0200",
    ]


def test_spring_forward_hourly_skips_the_missing_hour() -> None:
    s = make_app().cron("30 * * * *", Digest("x"), tz="Europe/Berlin")
    fires = run_of(s, utc(2025, 3, 29, 23, 40), 3)  # 00:40 CET
    assert [local(t) for t in fires] == ["03-30 01:30+0100", "03-30 03:30+0200", "03-30 04:30+0200"]
    assert fires[1] - fires[0] == 3600  # one elapsed hour


def test_fall_back_hourly_fires_every_elapsed_hour() -> None:
    # 2025-10-26: Berlin goes from 03:00 CEST back to 02:00 CET; 02:xx repeats.
    s = make_app().cron("0 * * * *", Digest("x"), tz="Europe/Berlin")
    fires = run_of(s, utc(2025, 10, 25, 21, 30), 6)
    assert fires == [utc(2025, 10, 25, 22) + 3600 * i for i in range(6)]
    assert [local(t) for t in fires] == [
        "10-26 00:00+0200",
        "10-26 01:00+0200",
        "10-26 02:00+0200",
        "10-26 02:00+0100",
        "10-26 03:00+0100",
        "10-26 04:00+0100",
    ]


def test_fall_back_fixed_time_fires_once() -> None:
    s = make_app().cron("30 2 * * *", Digest("x"), tz="Europe/Berlin")
    fires = run_of(s, utc(2025, 10, 25, 12), 3)
    assert [local(t) for t in fires] == ["10-26 02:30+0200", "10-27 02:30+0100", "10-28 02:30+0100"]
    # Inside the repeated hour, the next one is tomorrow's.
    assert local(s.next_after(utc(2025, 10, 26, 1, 10))) == "10-27 02:30+0100"
    assert s.latest_at_or_before(utc(2025, 10, 26, 1, 45)) == utc(2025, 10, 26, 0, 30)


@settings(max_examples=200, deadline=None)
@given(
    spec=st.sampled_from(["0 * * * *", "30 2 * * *", "*/20 1-3 * * *", "15 3 * * 0", "0 0 1 * *"]),
    t=st.floats(min_value=utc(2025, 1, 1), max_value=utc(2026, 12, 31), allow_nan=False),
)
def test_cron_arithmetic_is_consistent_across_dst(spec: str, t: float) -> None:
    s = Schedule.build("k", b"", cron=spec, tz="Europe/Berlin")
    nxt = s.next_after(t)
    prev = s.latest_at_or_before(t)
    assert prev is not None and prev <= t < nxt
    assert s.next_after(prev) == nxt, "no trigger between the previous and the next"
    assert s.latest_at_or_before(nxt) == nxt
    assert dt.datetime.fromtimestamp(nxt, UTC).second == 0


# -- misfire planning ---------------------------------------------------------------
def test_on_time_trigger_fires_within_grace() -> None:
    s = make_app().every(10, Digest("x"))
    assert s.due_triggers(None, 100.0, 1.0) == [100.0]
    assert s.due_triggers(None, 100.9, 1.0) == [100.0]
    assert s.due_triggers(None, 101.0, 1.0) == []  # 100 is now 1 s late: missed
    assert s.due_triggers(100.0, 100.5, 1.0) == []  # already fired
    assert s.due_triggers(90.0, 99.99, 1.0) == []  # not yet due


@pytest.mark.parametrize(
    ("misfire", "expected"),
    [("skip", [160.0]), ("fire_once", [150.0, 160.0])],
)
def test_missed_triggers(misfire: str, expected: list[float]) -> None:
    s = make_app().every(10, Digest("x"), misfire=misfire)  # type: ignore[arg-type]
    # Last fired at 100; down until 160.5: 110..150 missed, 160 on time.
    assert s.due_triggers(100.0, 160.5, 1.0) == expected
    # Nothing on time: fire_once catches up once (the latest missed), skip waits.
    assert s.due_triggers(100.0, 165.0, 1.0) == ([] if misfire == "skip" else [160.0])
    # A schedule that never fired has missed nothing.
    assert s.due_triggers(None, 165.0, 1.0) == []


def test_wide_grace_fires_every_trigger_inside_it() -> None:
    s = make_app().every(1, Digest("x"))
    assert s.due_triggers(100.0, 103.5, 5.0) == [101.0, 102.0, 103.0]


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ValueError, match="exactly one of cron= and interval="):
        Schedule(id="x", kind="k", payload=b"", cron="* * * * *", interval=60.0)
    with pytest.raises(ValueError, match="whole milliseconds"):
        Schedule(id="x", kind="k", payload=b"", interval=1.0001)
    with pytest.raises(ValueError, match="not normalized"):
        Schedule(id="x", kind="k", payload=b"", cron="@daily")


def test_leader_and_scheduler_are_actors() -> None:
    import chronos_trio

    assert "leader" in chronos_trio.ACTORS and "scheduler" in chronos_trio.ACTORS
