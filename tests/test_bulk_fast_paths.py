"""The bulk enqueue's fast paths give what the general ones give.

* ``_packed``: the RESP a bulk enqueue makes with its arguments is byte for
  byte what hiredis packs from the same command tuple (every kind of job the
  script takes: plain, delayed, run_at, headers, unique, flow control,
  workflow continuation, non-ASCII IDs and kinds), and an argument it does
  not pack leaves the command to the usual packer.
* ``_codec.batch_encoder``: the same bytes as the one-by-one encoder, or
  None (then the one-by-one way runs) for what it cannot vouch for; and
  ``new_jobs`` refuses bad input with the same errors either way.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import hiredis
import pytest

from chronos_trio.records import _producing
from chronos_trio.records._codec import batch_encoder, payload_encoder
from chronos_trio.records._control import ControlDefaults
from chronos_trio.records._errors import PayloadError
from chronos_trio.records._jobs import NewJob
from chronos_trio.records._producing import KindDefaults
from chronos_trio.records._unique import Unique, resolve
from chronos_trio.store.redis import _enqueue, _resp
from chronos_trio.store.redis._packed import PackedCommand, bulk

#: The done channel the enqueue scripts name in a record marked as waited on.
DONE = "{ns:done}"

KEYS = ["{q}:s", "{q}:r", "{q}:closed", "{q}:j:"]


@attrs.frozen
class P:
    a: float
    b: str = "x"
    c: int | None = 0


def _job(n: int, **kw: Any) -> NewJob:
    base: dict[str, Any] = {
        "id": f"{n:032x}",
        "queue": "q",
        "kind": "k.job",
        "payload": b'{"n":%d}' % n,
    }
    base.update(kw)
    return NewJob(**base)


def _batches() -> dict[str, list[NewJob]]:
    unique = resolve(Unique(key="k1", ttl=2.5), "k.job", b"{}")
    debounce = resolve(Unique(key="d", mode="debounce"), "k.job", b"{}")
    plain = [_job(n) for n in range(40)]
    return {
        "plain": plain,
        "delayed": [_job(n, delay=1.5 + n % 3) for n in range(40)],
        "run_at": [_job(n, run_at=1.7e9 + n / 7) for n in range(40)],
        "mixed": [
            *plain[:10],
            _job(100, headers=(("trace", "t-1"), ("tenant", "ü")), max_retries=0, timeout=2.25),
            _job(101, unique=unique, id_given=False),
            _job(102, unique=debounce, then='{"next":1}'),
            _job(103, id="é-given-id", kind="kind.ñ"),
            _job(104, payload=b"\x00\xff binary"),
            _job(105, payload=b""),
            *[_job(n, kind=f"k{n % 4}") for n in range(200, 230)],
        ],
    }


@pytest.mark.parametrize("name", ["plain", "delayed", "run_at", "mixed"])
def test_packed_enqueue_call_is_what_hiredis_packs(name: str) -> None:
    jobs = _batches()[name]
    ids = [j.id for j in jobs]
    idxs = list(range(len(jobs)))
    for batch_now in ("", "1700000000.25"):
        argv, packer = _enqueue._argv(batch_now, jobs, ids, idxs, DONE)
        assert packer is not None
        op = _enqueue._script_op(_Keys(), argv, packer)
        assert type(op.args) is PackedCommand
        plain = op.args[:]  # the tuple every other path reads
        assert type(plain) is tuple and plain[0] == "EVALSHA"
        expected = hiredis.pack_command(plain)  # type: ignore[arg-type]
        assert op.args.resp == expected
        assert _resp.pack([("PING",), op.args, ("TIME",)]) == b"".join(
            [hiredis.pack_command(("PING",)), expected, hiredis.pack_command(("TIME",))]  # type: ignore[arg-type]
        )


def test_small_calls_and_unpackable_arguments_take_the_usual_packer() -> None:
    jobs = _batches()["plain"]
    argv, packer = _enqueue._argv("", jobs[:3], [j.id for j in jobs[:3]], [0, 1, 2], DONE)
    assert packer is None
    assert type(_enqueue._script_op(_Keys(), argv, packer).args) is tuple
    # a lone surrogate is no UTF-8: the usual packer decides (and refuses) as before
    bad = [_job(n, kind="k\udc80") for n in range(20)]
    argv, packer = _enqueue._argv("", bad, [j.id for j in bad], list(range(20)), DONE)
    assert packer is None
    with pytest.raises(UnicodeEncodeError):
        _resp.pack([_enqueue._script_op(_Keys(), argv, packer).args])


def test_bulk_matches_hiredis_per_argument() -> None:
    for arg in ("", "abc", "ñé", b"", b"\x00\r\n", 0, 7, -12, 10**20):
        assert hiredis.pack_command(("X", arg))[len(b"*2\r\n$1\r\nX\r\n") :] == bulk(arg)  # type: ignore[arg-type]
    for arg in (True, 1.5, None):
        with pytest.raises(TypeError):
            bulk(arg)  # type: ignore[arg-type]


class _Keys:
    enqueue_keys = KEYS


# -- batch encoding --------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        [P(float(n), "s" * n, n) for n in range(50)],
        [P(1.5, 'ünïcode\n"quoted"', -(2**62))],
        [P(0.0, "x" * 2000)],  # longer than the copy limit
        [],
    ],
)
def test_batch_encoder_gives_the_one_by_one_bytes(values: list[P]) -> None:
    encode = payload_encoder(P)
    got = batch_encoder(P)(values)
    assert got == [encode(v) for v in values]


@pytest.mark.parametrize(
    "values",
    [
        [P(1.0), P(1.0, c=None)],  # a null: may stand for a NaN, not vouched for
        [P(1.0), P(math.nan)],
        [P(1.0), P(1.0, c=2**70)],  # beyond 64 bits: json writes it
        [P(1.0), "not a P"],
    ],
)
def test_batch_encoder_leaves_what_it_cannot_vouch_for(values: list[Any]) -> None:
    assert batch_encoder(P)(values) is None


def test_batch_encoder_is_none_for_other_types() -> None:
    assert batch_encoder(dict)([{"a": 1}]) is None
    assert batch_encoder(Any)([1, 2]) is None


def _new_jobs(values: list[Any], **kw: Any) -> list[NewJob]:
    spec = KindDefaults("k", payload_type=P, **kw)
    return _producing.new_jobs(spec, 200, (), values)


def test_new_jobs_same_records_either_way() -> None:
    fast = [P(float(n), "a", n) for n in range(30)]
    slow = [*fast, P(1.0, c=None)]  # the null sends the batch the one-by-one way
    a, b = _new_jobs(fast), _new_jobs(slow)
    assert [j.payload for j in a] == [j.payload for j in b[:30]]
    assert b[30].payload == b'{"a":1.0,"b":"x","c":null}'
    assert all(len(j.id) == 32 for j in a) and len({j.id for j in a + b}) == 61


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ([P(1.0), P(1.0, "x" * 300), P(math.nan)], "over the 200-byte limit"),
        ([P(1.0), P(math.nan), P(1.0, "x" * 300)], "not JSON-able"),
        ([P(1.0), "no", P(1.0, "x" * 300)], "expected a P payload, got str"),
        ([P(1.0), P(1.0, "x" * 300)], "over the 200-byte limit"),
    ],
)
def test_new_jobs_refuses_the_first_bad_payload(values: list[Any], error: str) -> None:
    with pytest.raises(PayloadError, match=error):
        _new_jobs(values)


def test_new_jobs_flow_control_sees_each_payload() -> None:
    jobs = _new_jobs([P(1.0), P(2.0)], control=ControlDefaults(priority=3))
    assert [j.control is not None for j in jobs] == [True, True]
