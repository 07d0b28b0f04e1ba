"""A chain link's successor worked out fast (issue 29, chain throughput):
``chain_successor``'s direct path and its cut continuations make exactly
what ``advance`` makes, for every shape, headers, failure handling and an
older worker's text included; and a flow's last step, whose continuation
asks for nothing (``nothing_follows``, the same texts in Python and in
settle.lua's Lua piece), writes no outbox entry."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from chronos_trio.records import _workflow
from chronos_trio.records._flow_build import FlowStep, Node, chain, group, start
from chronos_trio.records._workflow import advance, chain_successor, nothing_follows
from chronos_trio.store.redis import _scripts


def step(kind: str = "link", payload: bytes | None = None, **kw: Any) -> FlowStep:
    return FlowStep(kind, "default", payload, 3, 30.0, payload_type=Any, result_type=Any, **kw)


def links(n: int) -> list[FlowStep]:
    return [step(payload=b"0"), *(step() for _ in range(n - 1))]


def walk(then: str, job_id: str, result: bytes = b"1") -> list[str]:
    """Follow a chain from a job by ``chain_successor``, checking every step
    against ``advance`` (the continuer's walk): the successors' IDs."""
    seen = []
    while True:
        expected = advance(then, result, job_id)
        got = chain_successor(then, result, job_id)
        if got is None:
            return seen
        assert got == expected
        (job,) = got.jobs
        assert job.then is not None
        seen.append(job.id)
        then, job_id = job.then, job.id


FLOWS: dict[str, tuple[Node, dict[str, Any]]] = {
    "plain": (chain(*links(10)), {}),
    "headers": (chain(*links(6)), {"headers": (("a", 'x}"{é'), ("b", "2"))}),
    "on_failure": (chain(*links(5), on_failure=step("cb")), {}),
    "then a group": (chain(*links(4), group(step(), step()), step()), {}),
    "in a group": (group(chain(*links(4)), chain(*links(3))), {}),
    "non-ascii": (chain(step(payload=b'"\xc3\xa9"'), step("k\u00e9"), step(), step()), {}),
    "delayed": (chain(*links(3), step(delay=5.0), step()), {}),
    "flow on_failure": (chain(*links(4)), {"on_failure": step("cb")}),
}


@pytest.mark.parametrize("name", list(FLOWS))
def test_a_chain_walked_by_its_successors_is_what_advance_makes(name: str) -> None:
    node, kw = FLOWS[name]
    first = start(node, "wf-1", **kw).jobs[0]
    assert first.then is not None
    seen = walk(first.then, first.id)
    if name in ("plain", "headers", "non-ascii"):
        assert seen == [f"wf-1.{k}" for k in range(1, len(node.links))]  # type: ignore[union-attr]


def test_the_walk_reads_the_continuations_it_wrote_without_decoding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = start(chain(*links(10)), "wf-2").jobs[0]
    assert first.then is not None
    loaded: list[str] = []
    load = _workflow._load

    def counting(then: str) -> Any:
        loaded.append(then)
        return load(then)

    monkeypatch.setattr(_workflow, "_load", counting)
    then, job_id = first.then, first.id
    for _ in range(8):
        got = chain_successor(then, b"1", job_id)
        assert got is not None
        then, job_id = got.jobs[0].then, got.jobs[0].id  # type: ignore[assignment]
    # only the first link's continuation (the producer's) was decoded
    assert loaded == [first.then]


@pytest.mark.parametrize("name", ["plain", "headers", "non-ascii"])
def test_every_link_of_a_chain_takes_the_direct_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the link before the last included: its successor is the flow's last
    # step (continuation {"wf":ID}), made without the general walk
    node, kw = FLOWS[name]
    first = start(node, "wf-d", **kw).jobs[0]
    assert first.then is not None
    general: list[str] = []
    apply = _workflow._apply

    def counting(after: Any, result: bytes | None, job_id: str = "") -> Any:
        general.append(job_id)
        return apply(after, result, job_id)

    monkeypatch.setattr(_workflow, "_apply", counting)
    then: str | None = first.then
    job_id = first.id
    last = None
    while then is not None:
        got = chain_successor(then, b"1", job_id)
        if got is None:
            break
        last = got.jobs[0]
        then, job_id = last.then, last.id
    assert general == []
    assert last is not None and last.id == f"wf-d.{len(node.links) - 1}"  # type: ignore[union-attr]
    assert last.then is not None and '"seq"' not in last.then  # the flow's last step


def test_an_older_worker_s_text_is_read_as_it_means() -> None:
    first = start(chain(*links(5)), "wf-3", headers=(("h", "v"),)).jobs[0]
    assert first.then is not None
    # as json.dumps wrote it, spaces and escapes included
    older = json.dumps(json.loads(first.then))
    assert older != first.then
    got = chain_successor(older, b"1", first.id)
    assert got is not None and got == advance(older, b"1", first.id)
    assert got == chain_successor(first.then, b"1", first.id)


def test_the_kept_continuations_are_bounded() -> None:
    for k in range(_workflow._MADE_MOST + 10):
        first = start(chain(*links(3)), f"wf-b{k}").jobs[0]
        assert chain_successor(first.then or "", b"1", first.id) is not None
    assert 0 < len(_workflow._MADE) <= _workflow._MADE_MOST


def test_a_flow_s_last_step_asks_for_nothing() -> None:
    for kw in ({}, {"headers": (("a", "b"),)}):
        first = start(chain(*links(3)), "wf-4", **kw).jobs[0]  # type: ignore[arg-type]
        then, job_id = first.then, first.id
        assert not nothing_follows(then)
        got = chain_successor(then or "", b"1", job_id)
        assert got is not None
        then = got.jobs[0].then
        assert not nothing_follows(then)
        last = advance(then or "", b"1", got.jobs[0].id).jobs[0]
        assert last.id == "wf-4.2" and nothing_follows(last.then)
        assert advance(last.then or "", b"1", last.id).jobs == ()


#: Texts and whether they ask for nothing; what the Lua piece must agree on.
TEXTS = [
    ("{}", True),
    ('{"wf":"w"}', True),
    ('{"wf":""}', True),
    ('{"h":{"a":"b","c":"d"},"wf":"w.1"}', True),
    ('{"h":{},"wf":"w"}', True),
    ('{"wf":"a\\"b"}', False),
    ('{"h":{"a":"x},\\"wf\\":\\"y"},"wf":"W"}', False),
    ('{"h":{"a":"}"},"wf":"w"}', False),
    ('{"seq":[],"after":null,"wf":"w"}', False),
    ('{"f":null,"wf":"w"}', False),
    ('{"grp":"g","i":0,"n":2,"after":null,"wf":"w"}', False),
    ('{"wf": "w"}', False),
    ('{"wf":"w"} ', False),
    ('{"h":{"a":"b"}}', False),
    ("", False),
]


@pytest.mark.parametrize(("text", "expected"), TEXTS)
def test_nothing_follows_reads_only_exact_empty_continuations(text: str, expected: bool) -> None:
    assert nothing_follows(text) is expected


def test_settle_lua_s_piece_reads_the_same_texts(redis_url: str) -> None:
    piece = _scripts.piece("nothing_follows")
    assert piece is not None
    script = piece.decode() + (
        "local out = {}\n"
        "for i, t in ipairs(ARGV) do out[i] = nothing_follows('extras\\0' .. t) and 1 or 0 end\n"
        "out[#ARGV + 1] = nothing_follows('no continuation') and 1 or 0\n"
        "return out\n"
    )
    client = redis.Redis.from_url(redis_url)
    try:
        got = client.eval(script, 0, *(t for t, _ in TEXTS))
    finally:
        client.close()
    assert got == [int(e) for _, e in TEXTS] + [0]


def test_the_completer_s_copy_of_a_success_keeps_every_field() -> None:
    import attrs

    from chronos_trio.actors import completer
    from chronos_trio.records._jobs import LeaseRef, NewJob
    from chronos_trio.store import SettleKind, Settlement, Successor

    values: dict[str, Any] = {
        "lease": LeaseRef("j", "q", "t", ("p",), True),
        "kind": SettleKind.SUCCEEDED,
        "error": "e",
        "retry_delay": 1.5,
        "retain_for": 2.5,
        "result": b"3",
        "result_ttl": 4.5,
        "unclaimed_grace": 5.5,
        "started": 6.5,
        "successor": None,
    }
    # a field added to Settlement must be added to the copy, too
    assert [f.name for f in attrs.fields(Settlement)] == list(values)
    outcome = Settlement(**values)
    successor = Successor(NewJob(id="n", queue="q", kind="k", payload=b"1"), "w")
    got = completer._with_successor(outcome, successor)
    assert got == attrs.evolve(outcome, successor=successor)
