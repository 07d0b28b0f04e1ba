"""Conformance checks of workflow records (:class:`~chronos_trio.store.WorkflowRole`):
saved once (starting again is the same run), read back as saved, cancel
marks that are idempotent and atomic with the read, and expiry. Registered
in :data:`~chronos_trio.testing.conformance.CHECKS` like the others when
``chronos_trio.testing`` is imported."""

from __future__ import annotations

import trio

from ..store._capabilities import Capability
from .conformance import Fresh, check

#: Slack for comparing the store's clock read in two calls (Redis: microseconds).
_SLACK = 0.01
_TREE = '{"chain":[{"job":{"id":"w.0","kind":"k","queue":"q"}}]}'


@check(Capability.WORKFLOW_CONTROL)
async def check_a_workflow_record_is_saved_once(fresh: Fresh) -> None:
    store = await fresh()
    assert await store.workflow_record("w") is None, "no record before a save"
    before = await store.now()
    assert await store.save_workflow("w", _TREE, "k", 60.0) is True
    after = await store.now()
    got = await store.workflow_record("w")
    assert got is not None
    assert (got.id, got.tree, got.first_kind, got.cancelled) == ("w", _TREE, "k", None)
    assert before - _SLACK <= got.created <= after + _SLACK, "created on the store's clock"
    # starting the same workflow again is the same run: the record stands
    assert await store.save_workflow("w", '{"job":{}}', "other", 60.0) is False
    assert await store.workflow_record("w") == got
    # an ID with dots, braces and non-ASCII is one workflow of its own
    odd = "a.b{c}%é"
    assert await store.save_workflow(odd, _TREE, "k", 60.0) is True
    assert (await store.workflow_record(odd)) is not None
    assert await store.workflow_record("a.b") is None


@check(Capability.WORKFLOW_CONTROL)
async def check_a_workflow_cancel_mark_is_idempotent(fresh: Fresh) -> None:
    store = await fresh()
    assert await store.cancel_workflow("nobody") is None, "an unknown workflow is not marked"
    assert await store.cancelled(["nobody"]) == set()
    await store.save_workflow("a", _TREE, "k", 60.0)
    await store.save_workflow("b", _TREE, "k", 60.0)
    assert await store.cancelled(["a", "b"]) == set()
    assert await store.cancelled([]) == set()
    before = await store.now()
    first = await store.cancel_workflow("a")
    after = await store.now()
    assert first is not None and first.tree == _TREE and first.first_kind == "k"
    assert first.cancelled is not None and before - _SLACK <= first.cancelled <= after + _SLACK
    await trio.sleep(0.01)
    again = await store.cancel_workflow("a")
    assert again == first, "the first mark stands"
    assert await store.workflow_record("a") == first
    assert await store.cancelled(["a", "b", "nobody", "a"]) == {"a"}
    # a save of a cancelled workflow's ID changes nothing: still cancelled
    assert await store.save_workflow("a", _TREE, "k", 60.0) is False
    assert await store.cancelled(["a"]) == {"a"}
    # an unknown ID stays unknown after a cancel: a later start is not cancelled
    assert await store.save_workflow("nobody", _TREE, "k", 60.0) is True
    assert await store.cancelled(["nobody"]) == set()


@check(Capability.WORKFLOW_CONTROL)
async def check_a_workflow_record_expires(fresh: Fresh) -> None:
    store = await fresh()
    await store.save_workflow("w", _TREE, "k", 0.3)
    await store.save_workflow("long", _TREE, "k", 60.0)
    await store.cancel_workflow("w")
    await store.cancel_workflow("long")
    await trio.sleep(0.5)
    assert await store.workflow_record("w") is None, "an expired record is gone"
    assert await store.cancelled(["w", "long"]) == {"long"}
    assert await store.cancel_workflow("w") is None
    assert await store.save_workflow("w", _TREE, "k2", 60.0) is True, "a new run after expiry"
    got = await store.workflow_record("w")
    assert got is not None and got.first_kind == "k2" and got.cancelled is None


@check(Capability.WORKFLOW_CONTROL)
async def check_a_workflow_record_is_kept_alive_never_shortened(fresh: Fresh) -> None:
    store = await fresh()
    await store.save_workflow("w", _TREE, "k", 0.4)
    await store.save_workflow("long", _TREE, "k", 60.0)
    kept = await store.keep_workflows({"w": 2.0, "long": 1.0, "none": 5.0})
    assert set(kept) == {"w", "long"}, "no record is made for an unknown ID"
    assert 2.0 - _SLACK <= kept["w"] <= 2.0 + _SLACK, kept
    assert 59.0 <= kept["long"] <= 60.0 + _SLACK, "never shortened"
    again = await store.keep_workflows({"w": 0.1})
    assert 1.0 <= again["w"] <= 2.0 + _SLACK, "never shortened"
    await trio.sleep(0.6)
    got = await store.workflow_record("w")
    assert got is not None and got.first_kind == "k", "kept past its first ttl"
    assert await store.workflow_record("none") is None
    assert await store.keep_workflows({}) == {}
