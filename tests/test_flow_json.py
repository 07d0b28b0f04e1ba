"""Continuation text (records._flow_json): orjson's speed, the standard
library's meaning. What ``json`` wrote before reads the same, and what is
written now reads the same with ``json`` (older workers in a rolling upgrade)."""

from __future__ import annotations

import json
import math

import pytest

from chronos_trio.records import _flow_json as flow_json
from chronos_trio.records import _workflow as wf
from chronos_trio.records._flow_build import Chain, FlowStep, chain, group, start


def _flow() -> Chain:
    step = FlowStep("link", "default", None, 3, 60.0, result_type=int)
    first = FlowStep("link", "default", b"0", 3, 60.0, delay=0.5, result_type=int)
    return chain(first, step, group(step, chain(step, step)), FlowStep("s", "q", None, 1, 1.0))


def test_a_continuation_is_written_as_json_wrote_it() -> None:
    for job in start(_flow(), "w", headers=(("trace", "t1"),)).jobs:
        assert job.then is not None
        assert job.then == json.dumps(json.loads(job.then), separators=(",", ":"))


def test_advancing_a_chain_gives_the_same_jobs_as_json_would() -> None:
    then = start(_flow(), "w").jobs[0].then
    assert then is not None
    steps = wf.advance(then, b"1")
    [nxt] = steps.jobs
    assert nxt.id == "w.1" and nxt.payload == b"1" and nxt.then is not None
    written = json.loads(nxt.then)
    assert written["seq"] == json.loads(then)["seq"][1:] and written["after"] is None


@pytest.mark.parametrize(
    "value",
    [
        {"to": math.inf, "p": None},
        {"d": -math.inf},
        {"after": None, "x": [10**30, None]},
        {"kind": "été", "p": None},
        {"seq": [{"job": {"id": "w.1", "p": None, "to": 1e-7}}], "after": None},
    ],
)
def test_what_orjson_would_write_otherwise_is_written_by_json(value: object) -> None:
    text = flow_json.dumps(value)
    back = json.loads(text)
    assert repr(back) == repr(value)  # NaN-free reprs: inf, big ints, exact floats
    assert flow_json.loads(text) == back or math.inf in back.values()  # type: ignore[union-attr]


def test_text_only_json_reads_is_read() -> None:
    assert flow_json.loads('{"to":Infinity}') == {"to": math.inf}
    assert math.isnan(flow_json.loads('{"to":NaN}')["to"])
    with pytest.raises(ValueError):
        flow_json.loads("{not json")


def test_size_counts_utf8_bytes() -> None:
    assert flow_json.size('{"a":"x"}') == 9
    assert flow_json.size('{"a":"é"}') == 10
