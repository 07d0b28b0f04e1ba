"""Small pieces: payload codec, retry policy, restart window, queue parsing,
weight sharing, the public API."""

from __future__ import annotations

import datetime as dt
import enum
import math
import random
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import chronos_trio
from chronos_trio import PayloadError, RetryPolicy, parse_queues
from chronos_trio.records import _codec
from chronos_trio.records._codec import decode_payload, encode_payload
from chronos_trio.runtime import RestartWindow
from chronos_trio.store import QueueWeight, share_by_weight, share_strictly
from chronos_trio.store.postgres import PostgresStore


class Color(enum.Enum):
    RED = "red"


@attrs.frozen
class Nested:
    when: dt.datetime
    tags: list[str]
    color: Color
    maybe: int | None = None


@attrs.frozen
class Outer:
    inner: Nested
    raw: dict[str, Any]


def test_attrs_payload_round_trips_through_json() -> None:
    value = Outer(
        Nested(dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC), ["a"], Color.RED), {"k": [1]}
    )
    data = encode_payload(value, Outer)
    assert data.startswith(b"{") and b"pickle" not in data
    assert decode_payload(data, Outer) == value


def test_bytes_payload_passes_through() -> None:
    assert encode_payload(b"\x00\xff", bytes) == b"\x00\xff"
    assert decode_payload(b"\x00\xff", bytes) == b"\x00\xff"
    with pytest.raises(PayloadError, match="expected a bytes payload"):
        encode_payload("text", bytes)


def test_codec_errors_are_clear() -> None:
    with pytest.raises(PayloadError, match="not JSON-able"):
        encode_payload({"x": object()}, Any)
    with pytest.raises(PayloadError, match="not valid JSON"):
        decode_payload(b"{oops", Outer)
    with pytest.raises(PayloadError, match="does not structure as Nested"):
        decode_payload(b'{"when": "yesterday", "tags": [], "color": "red"}', Nested)


@attrs.frozen
class Measured:
    value: float


class SubOuter(Outer):
    pass


def test_the_bulk_encoder_encodes_and_refuses_as_encode_payload() -> None:
    """``payload_encoder`` (a bulk enqueue's loop) gives encode_payload's
    bytes for every kind of value, and the same errors."""
    nested = Nested(dt.datetime(2026, 1, 2, tzinfo=dt.UTC), ["a"], Color.RED, 3)
    cases: list[tuple[Any, Any]] = [
        (Outer(nested, {"k": [1, None]}), Outer),
        (SubOuter(nested, {}), Outer),  # a subclass: the general path
        ({"a": 1}, Any),
        ("text", str),
        (b"\x00raw", bytes),
        (Measured(1.5), Measured),
    ]
    for value, kind in cases:
        assert _codec.payload_encoder(kind)(value) == encode_payload(value, kind)
    encode = _codec.payload_encoder(Measured)
    for bad in (Measured(math.nan), Measured(math.inf), Outer(nested, {})):
        with pytest.raises(PayloadError) as ours:
            encode(bad)
        with pytest.raises(PayloadError) as theirs:
            encode_payload(bad, Measured)
        assert str(ours.value) == str(theirs.value)


def test_bulk_ids_are_distinct_hex() -> None:
    app = chronos_trio.App()

    @app.task("bulk.ids")
    async def bulk_ids(m: Measured) -> None:
        return None

    task: Any = bulk_ids
    jobs = task.new_jobs(Measured(float(i)) for i in range(500))  # a generator too
    assert len({j.id for j in jobs}) == 500
    assert all(len(j.id) == 32 and int(j.id, 16) >= 0 for j in jobs)
    assert [decode_payload(j.payload, Measured).value for j in jobs] == [
        float(i) for i in range(500)
    ]


@attrs.frozen
class Numbers:
    big: int
    ratio: float
    by_id: dict[int, str]


def test_codec_keeps_what_fast_json_would_change() -> None:
    # Integers beyond 64 bits round-trip exactly (orjson alone reads them as floats).
    value = Numbers(big=2**70 + 1, ratio=0.5, by_id={7: "seven"})
    data = encode_payload(value, Numbers)
    assert b"1180591620717411303425" in data
    assert decode_payload(data, Numbers) == value
    assert decode_payload(b'{"n": -%d}' % 2**80, Any) == {"n": -(2**80)}
    # NaN/Infinity are not JSON other languages can read: refused at enqueue
    # (orjson alone would silently store null).
    for bad in (float("nan"), float("inf")):
        with pytest.raises(PayloadError, match="not JSON-able"):
            encode_payload(Numbers(big=1, ratio=bad, by_id={}), Numbers)
    # A real null is kept, and data stored before (NaN written by json) still reads.
    assert encode_payload({"x": None}, Any) == b'{"x":null}'
    assert math.isnan(decode_payload(b'{"x": NaN}', Any)["x"])


@attrs.frozen
class Contact:
    name: str
    reply_to: str | None
    scores: list[float | None]
    extra: dict[str, Any]


@attrs.frozen
class Wrapper:
    numbers: Numbers
    note: str | None


def _no_strict_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(raw: Any) -> bytes:
        raise AssertionError(f"took the standard-library fallback for {raw!r}")

    monkeypatch.setattr(_codec, "_strict_dumps", refuse)


def test_codec_encodes_none_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    value = Contact(
        name='says "null" and NaN, Infinity',
        reply_to=None,
        scores=[0.5, None, -1.25e300],
        extra={"null": None, "nested": [None, {"x": None}], "NaN": "NaN"},
    )
    raw = _codec.converter.unstructure(value)
    strict = _codec._strict_dumps(raw)
    _no_strict_fallback(monkeypatch)
    assert encode_payload(value, Contact) == strict
    assert decode_payload(strict, Contact) == value
    assert encode_payload(None, Any) == b"null"
    assert encode_payload([None, "null"], Any) == b'[null,"null"]'


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "where",
    [
        lambda x: x,
        lambda x: [1, None, x],
        lambda x: {"a": None, "b": [{"c": x}]},
        lambda x: {7: None, "b": (1, x)},
        lambda x: Numbers(big=1, ratio=x, by_id={}),
        lambda x: Numbers(big=2**70, ratio=x, by_id={}),  # orjson refuses the int first
        lambda x: Contact("n", None, [None, x], {}),
        lambda x: Contact("n", "r", [], {"deep": [[{"v": x}]]}),
        lambda x: Wrapper(Numbers(big=1, ratio=x, by_id={1: "a"}), note=None),
    ],
    ids=["bare", "list", "dict", "int-key-dict-tuple", "attrs", "attrs-big-int", "attrs-list",
         "attrs-dict", "nested-attrs"],
)  # fmt: skip
def test_codec_refuses_non_finite_floats_anywhere(bad: float, where: Any) -> None:
    value = where(bad)
    with pytest.raises(PayloadError, match="not JSON-able"):
        encode_payload(value, Any)


def test_codec_keeps_big_integers_exact_beside_none() -> None:
    # -(2**63) - 1 has only 19 digits but is beyond 64 bits too.
    for big in (2**64, -(2**63) - 1, -(10**19) + 1, 2**70 + 1, -(10**40)):
        value = {"big": big, "none": None, "list": [None, big]}
        data = encode_payload(value, Any)
        assert str(big).encode() in data
        assert decode_payload(data, Any) == value
    # Just inside 64 bits orjson writes them itself, exactly.
    for edge in (2**64 - 1, -(2**63)):
        assert decode_payload(encode_payload({"n": edge, "x": None}, Any), Any) == {
            "n": edge,
            "x": None,
        }


@given(st.integers(min_value=-(2**66), max_value=2**66))
def test_codec_reads_integers_back_exactly_around_64_bits(n: int) -> None:
    for data in (encode_payload([n, None], Any), b"[%d, null]" % n):
        back = decode_payload(data, Any)
        assert back == [n, None] and type(back[0]) is int


def test_codec_reads_digit_runs_in_strings() -> None:
    for text in ("12345678901234567890", "-1234567890123456789", "id 00000000000000000000"):
        assert decode_payload(encode_payload({"s": text}, Any), Any) == {"s": text}


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
))  # fmt: skip
def test_codec_round_trips_any_json_value(value: Any) -> None:
    assert decode_payload(encode_payload(value, Any), Any) == value


def test_retry_policy_defaults_follow_the_seed() -> None:
    policy = RetryPolicy()
    assert [policy.delay(a) for a in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert policy.delay(10_000) == 60  # no overflow


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_full_jitter_stays_within_the_backoff(attempt: int, seed: int) -> None:
    policy = RetryPolicy(jitter=True)
    delay = policy.delay(attempt, rng=random.Random(seed))
    assert 0 <= delay <= RetryPolicy().delay(attempt)


def test_restart_window_counts_a_failure_exactly_period_old() -> None:
    window = RestartWindow(intensity=2, period=10.0)
    assert [window.record_failure(t) for t in (0.0, 5.0)] == [False, False]
    assert window.record_failure(10.0), "0.0 is exactly one period old: still in the window"
    assert window.failures == 3


def test_restart_window_drops_a_failure_older_than_period() -> None:
    window = RestartWindow(intensity=2, period=10.0)
    assert [window.record_failure(t) for t in (0.0, 5.0, 10.5)] == [False, False, False]
    assert window.failures == 2  # 0.0 fell out
    assert window.record_failure(15.0), "5.0, 10.5 and 15.0 are within 10 s"
    assert window.failures == 3


def test_restart_window_intensity_zero_gives_up_at_the_first_failure() -> None:
    window = RestartWindow(intensity=0, period=1.0)
    assert window.failures == 0
    assert window.record_failure(0.0)
    assert window.failures == 1


def test_restart_window_allows_intensity_failures_at_one_instant() -> None:
    window = RestartWindow(intensity=3, period=1.0)
    assert [window.record_failure(7.0) for _ in range(4)] == [False, False, False, True]


def test_restart_window_spread_failures_never_exceed() -> None:
    window = RestartWindow(intensity=1, period=10.0)
    assert not any(window.record_failure(10.5 * i) for i in range(100))
    assert window.failures == 1  # memory stays bounded by one window


def test_restart_window_rejects_bad_limits() -> None:
    with pytest.raises(ValueError, match="intensity must be >= 0"):
        RestartWindow(intensity=-1, period=1.0)
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match="period must be > 0"):
            RestartWindow(intensity=1, period=bad)


@given(
    st.integers(min_value=0, max_value=4),
    st.integers(min_value=1, max_value=20),
    st.lists(st.integers(min_value=0, max_value=15), max_size=30),
)
def test_restart_window_matches_its_definition(
    intensity: int, period: int, gaps: list[int]
) -> None:
    # Integer times: the boundary (exactly one period old) is hit often and exactly.
    window = RestartWindow(intensity=intensity, period=float(period))
    times: list[float] = []
    for gap in gaps:
        now = (times[-1] if times else 0.0) + gap
        times.append(now)
        in_window = [t for t in times if now - period <= t]
        assert window.record_failure(now) == (len(in_window) > intensity)
        assert window.failures == len(in_window)


def test_parse_queues_forms_and_errors() -> None:
    assert parse_queues("critical=6, default=3,low") == (
        QueueWeight("critical", 6),
        QueueWeight("default", 3),
        QueueWeight("low", 1),
    )
    assert parse_queues({"a": 2}) == (QueueWeight("a", 2),)
    assert parse_queues(["a", ("b", 3)]) == (QueueWeight("a"), QueueWeight("b", 3))
    for bad, message in [
        ("a=x", "expected name=INT"),
        ("a=0", "weights >= 1"),
        ("a,a", "listed twice"),
        ("", "at least one queue"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_queues(bad)


@given(
    st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=5),
    st.lists(st.integers(min_value=0, max_value=100), min_size=5, max_size=5),
    st.integers(min_value=0, max_value=300),
)
def test_share_by_weight_fills_without_overdrawing(
    weights: list[int], available: list[int], count: int
) -> None:
    queues = [QueueWeight(f"q{i}", w) for i, w in enumerate(weights)]
    avail = {q.name: available[i] for i, q in enumerate(queues)}
    shares = share_by_weight(queues, count, avail)
    assert sum(shares.values()) == min(count, sum(avail.values()))
    assert all(0 < n <= avail[name] for name, n in shares.items())


@given(
    st.lists(st.integers(min_value=1, max_value=10), min_size=1, max_size=5),
    st.lists(st.integers(min_value=0, max_value=100), min_size=5, max_size=5),
    st.integers(min_value=0, max_value=300),
)
def test_share_strictly_drains_in_list_order(
    weights: list[int], available: list[int], count: int
) -> None:
    queues = [QueueWeight(f"q{i}", w) for i, w in enumerate(weights)]
    avail = {q.name: available[i] for i, q in enumerate(queues)}
    shares = share_strictly(queues, count, avail)
    assert sum(shares.values()) == min(count, sum(avail.values()))
    assert all(0 < n <= avail[name] for name, n in shares.items())
    # a queue gets a slot only when every queue before it gave all it had
    for i, q in enumerate(queues):
        if shares.get(q.name):
            assert all(shares.get(p.name, 0) == avail[p.name] for p in queues[:i])


def test_share_strictly_ignores_weights() -> None:
    queues = [QueueWeight("high", 1), QueueWeight("low", 1000)]
    assert share_strictly(queues, 10, {"high": 3, "low": 50}) == {"high": 3, "low": 7}
    assert share_strictly(queues, 10, {"high": 30, "low": 50}) == {"high": 10}
    assert share_by_weight(queues, 10, {"high": 30, "low": 50})["high"] >= 1


def test_store_url_dispatch() -> None:
    assert isinstance(chronos_trio.open_store(None), chronos_trio.MemoryStore)
    assert isinstance(chronos_trio.open_store("memory://"), chronos_trio.MemoryStore)
    with pytest.raises(ValueError, match="unsupported store URL"):
        chronos_trio.open_store("mysql://x")
    assert isinstance(chronos_trio.open_store("postgres://db/x"), PostgresStore)


_RUNS = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 4)), max_size=5)


@given(st.lists(_RUNS, min_size=1, max_size=4), st.integers(0, 40))
def test_earliest_runs_takes_the_earliest_source_by_source_on_ties(
    raw: list[list[tuple[int, int]]], n: int
) -> None:
    from chronos_trio.store.redis._alloc import earliest_runs

    # each source: runs of strictly growing scores, as peek_ready.lua returns them
    sources = []
    for k, runs in enumerate(raw):
        merged: dict[float, int] = {}
        for score, count in runs:
            merged[float(score)] = merged.get(float(score), 0) + count
        sources.append((f"s{k}", sorted(merged.items())))
    taken = earliest_runs(sources, n)
    # the expected: every entry, ordered by (score, source rank), the first n
    entries = sorted(
        (score, rank) for rank, (_, r) in enumerate(sources) for score, c in r for _ in range(c)
    )
    want: dict[str, int] = {}
    for _, rank in entries[:n]:
        want[sources[rank][0]] = want.get(sources[rank][0], 0) + 1
    assert taken == want


@given(
    st.lists(_RUNS, min_size=1, max_size=6), st.integers(1, 40), st.integers(1, 12), st.booleans()
)
def test_a_capped_peek_read_further_where_needed_splits_as_a_full_peek(
    raw: list[list[tuple[int, int]]], n: int, cap: int, whole_runs: bool
) -> None:
    from chronos_trio.store.redis._alloc import earliest_bounded, read_further

    # each source: its first n entries as runs (what a full peek_ready.lua
    # describes), and the same cut at cap entries (in the middle of a run,
    # as its last ZRANGE may, or past it, as its counted runs may)
    full, capped, cut = [], {}, set()
    for k, runs in enumerate(raw):
        merged: dict[float, int] = {}
        for score, count in runs:
            merged[float(score)] = merged.get(float(score), 0) + count
        entries = [s for s, c in sorted(merged.items()) for _ in range(c)]
        first = entries[:n]
        full.append((f"s{k}", [(s, first.count(s)) for s in sorted(set(first))]))
        if whole_runs and len(first) > cap and first[cap - 1] == first[cap]:
            shown = [e for e in first if e <= first[cap - 1]]  # a run counted past the cap
        else:
            shown = first[:cap]
        capped[f"s{k}"] = [(s, shown.count(s)) for s in sorted(set(shown))]
        if len(shown) < len(entries) and len(shown) < n:
            cut.add(f"s{k}")
    for key in read_further(capped, cut, n):
        capped[key] = dict(full)[key]
    assert earliest_bounded([(k, capped[k]) for k, _ in full], n) == earliest_bounded(full, n)


def test_a_payload_typed_none_decodes_null_and_refuses_anything_else() -> None:
    assert decode_payload(b"null", type(None)) is None
    with pytest.raises(PayloadError, match="does not structure as None: got int"):
        decode_payload(b"1", type(None))


async def test_a_handler_that_takes_none_runs(autojump_clock: object) -> None:
    import trio

    app = chronos_trio.App()
    seen: list[object] = []

    @app.task("takes.none")
    async def takes_none(nothing: None) -> None:
        seen.append(nothing)

    await takes_none.enqueue(None)
    with trio.fail_after(30):
        async with app.open_worker(concurrency=1):
            while not seen:
                await trio.sleep(0.01)
    assert seen == [None]
