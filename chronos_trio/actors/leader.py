"""leader-elector: holds the store's leadership lease for singleton duties.

Every worker runs one; at most one of them leads an app at a time (its lease
in the store is unexpired), and the scheduler and janitor work only while
``rt.leadership`` holds this worker's :class:`Leadership`. Guarantees:

* A follower tries to take over every ``leader_ttl / 3`` seconds and exactly
  when the current lease expires, so a crashed or paused leader is replaced
  within ``leader_ttl`` (plus one store round trip), and a resigning one within
  ``leader_ttl / 3``.
* The leader renews every ``leader_ttl / 2`` (retrying until its deadline
  when the store fails, so one lost renewal costs nothing). It steps down (``rt.leadership``
  becomes None) at once when a renewal is refused, and, when the store cannot
  be reached, before its lease would expire by its own clock: the deadline
  is counted from when each renewal was *sent*, less a 5% margin for clock
  rate differences, so it passes before the store's own expiry. A leader
  paused past its lease therefore steps down as soon as it runs again.
* On the way out (shutdown, crash, cancellation) it resigns, so a follower
  takes over at its next attempt (within ``leader_ttl / 3``) instead of
  after the lease expires.
* Being leader is advisory for the process; correctness does not depend on it:
  every trigger the scheduler enqueues is fenced by the epoch in the store.
"""

from __future__ import annotations

import logging

import trio

from ..records._log import log_event
from ..runtime._backoff import Backoff
from ..runtime._state import Runtime
from ..store import Leadership, StoreError

log = logging.getLogger("chronos_trio.leader")

#: Fraction of the lease a leader gives up early when it cannot renew.
SAFETY_MARGIN = 0.05


async def run(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    elector = _Elector(rt)
    task_status.started()
    try:
        while True:
            lead, sent = await elector.acquire()
            rt.leadership.value = lead
            log_event(
                log, logging.INFO, "leads", holder=lead.holder, lock=lead.name, epoch=lead.epoch
            )
            await elector.hold(lead, sent)
            if rt.leadership.value == lead:
                rt.leadership.value = None
    finally:
        lead = rt.leadership.value
        rt.leadership.value = None
        if lead is not None:
            await elector.resign(lead)


class _Elector:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.name = rt.registry.leadership_name
        self.holder = rt.config.worker_id
        self.ttl = rt.config.leader_ttl
        self.every = self.ttl / 3  # a follower's attempts
        self.renew_every = self.ttl / 2  # the leader's renewals
        # Give up a little before the store's lease ends: this host's clock may
        # run slightly faster or slower than the store's.
        self.safe_ttl = self.ttl * (1 - SAFETY_MARGIN)
        self.backoff = Backoff(log, "leader election")

    async def acquire(self) -> tuple[Leadership, float]:
        """Wait until this worker leads; returns the leadership and the local
        time its acquisition was sent (the start of its lease)."""
        store = self.rt.store
        while True:
            sent = trio.current_time()
            try:
                lead = await store.acquire_leadership(self.name, self.holder, self.ttl)
                if lead is not None:
                    self.backoff.reset()
                    return lead, sent
                current = await store.current_leader(self.name)
                now = await store.now()
            except StoreError as exc:
                await self.backoff.failed(exc)
                continue
            self.backoff.reset()
            if current is None:
                # It expired or was resigned just now: try again almost at once.
                await trio.sleep(min(self.every, 0.01))
                continue
            # Wake when the current lease runs out, so a dead leader is
            # replaced as soon as the store allows, not up to ttl/3 later.
            await trio.sleep(min(self.every, max(0.0, current.expires_at - now)))

    async def hold(self, lead: Leadership, sent: float) -> None:
        """Renew ``lead`` until it is lost, refused, or given up elsewhere
        (the scheduler clears ``rt.leadership`` on a stale epoch)."""
        store = self.rt.store
        deadline = sent + self.safe_ttl
        next_renewal = sent + self.renew_every
        while True:
            with trio.move_on_at(next_renewal):
                await self.rt.leadership.wait_value(lambda v: v != lead)
                log_event(
                    log,
                    logging.INFO,
                    "steps down",
                    holder=lead.holder,
                    lock=lead.name,
                    epoch=lead.epoch,
                )
                return
            while True:
                attempt = trio.current_time()
                if attempt >= deadline:
                    log_event(
                        log,
                        logging.WARNING,
                        "could not renew leadership before its lease expired "
                        "(store unreachable, or this process was paused); stepping down",
                        holder=lead.holder,
                        lock=lead.name,
                        epoch=lead.epoch,
                    )
                    return
                renewed: bool | None = None
                try:
                    # Never stay leader past the deadline waiting on the store.
                    with trio.move_on_at(deadline):
                        renewed = await store.renew_leadership(
                            self.name, self.holder, lead.epoch, self.ttl
                        )
                except StoreError as exc:
                    with trio.move_on_at(deadline):
                        await self.backoff.failed(exc)
                    continue
                if renewed is None:
                    continue  # timed out at the deadline: step down above
                self.backoff.reset()
                if not renewed:
                    log_event(
                        log,
                        logging.WARNING,
                        "leadership lost: renewal refused; stepping down",
                        holder=lead.holder,
                        lock=lead.name,
                        epoch=lead.epoch,
                    )
                    return
                deadline = attempt + self.safe_ttl
                next_renewal = attempt + self.renew_every
                break

    async def resign(self, lead: Leadership) -> None:
        # Shielded: we are usually here because of a cancellation, and a
        # follower should not have to wait for the lease to expire.
        with trio.CancelScope(shield=True), trio.move_on_after(self.rt.config.flush_timeout):
            try:
                if await self.rt.store.resign_leadership(lead.name, lead.holder, lead.epoch):
                    log_event(
                        log,
                        logging.INFO,
                        "resigned",
                        holder=lead.holder,
                        lock=lead.name,
                        epoch=lead.epoch,
                    )
            except StoreError as exc:
                log_event(
                    log,
                    logging.WARNING,
                    "could not resign: the lease will expire",
                    lock=lead.name,
                    error=str(exc),
                )
