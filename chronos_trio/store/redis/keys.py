"""Every Redis key pattern of the store, in one place.

Layout (``ns`` is the store's namespace, names are escaped so that ``{``/``}``
in a queue name cannot change a hash tag):

Partition keys share the tag ``{ns:q:<queue>:v<version>:p<partition>}`` so
each Lua script touches one slot, and a hot queue spreads across the slots of
a Redis Cluster:

=====================  =====================================================
``<tag>:scheduled``    zset, score = run_at
``<tag>:ready``        zset, score = run_at (leased oldest due first)
``<tag>:leased``       zset, score = lease expiry, plus :data:`LEASED_SENTINEL`
``<tag>:retry``        zset of retry_wait jobs, score = run_at
``<tag>:succeeded``    zset of retained succeeded jobs, score = end of retention
``<tag>:dead``         zset, score = finished_at
``<tag>:tokens``       fencing counter (INCRBY)
``<tag>:closed``       marker: the version was completed; enqueue refuses it
``<tag>:damaged``      quarantine hash: field = job ID of an index entry that
                       had no job hash behind it (or a key that is not a hash),
                       taken out of its index by a script; value = JSON
                       ``{"reason": ..., "at": epoch seconds, "index": ...}``
``<tag>:j:<id>``       the job hash; field ``v`` is its record format
                       (:data:`~._codec.RECORD_FORMAT`; absent = format 1)
``<tag>:outbox``       zset of workflow jobs that succeeded, score = when:
                       the continuations the continuer drains
``<tag>:gone:<id>``    a deleted workflow job's hash, kept with its outbox
                       entry (its end, or its failure as deleted) until
                       the continuer handled it (or WORKFLOW_KEEP passed)
``<tag>:aborted``      zset marking the aborted jobs among ``<tag>:dead``'s
                       entries (aborted jobs are kept there), score =
                       finished_at: what counts and lists them (a mark whose
                       job left the dead index is stale and ignored)
``<tag>:u:<key>``      a unique job's lock (string): its mode letter (``l``
                       lock, ``t`` throttle, ``d`` debounce) then the ID of
                       the job that holds the key; a ttl lapses it. Unique
                       jobs route to the partition of their key
                       (:func:`~chronos_trio.store._partitioning.routed_job_id`)
``<tag>:rl:<key>``     a rate limit's state (string): its GCRA theoretical
                       arrival time; lapses (PX) when that time has come
``<tag>:cap:<key>``    a concurrency limit's holders (zset): job ID, score =
                       its lease expiry when taken (renewed holders are
                       re-read from their records when that passes)
``<tag>:limits``       set of the limit keys in use (``rl:<key>``,
                       ``cap:<key>``), for inspection; limited jobs route to
                       the partition of their first key (as unique jobs do)
``<tag>:waiting``      set of the concurrency limits' zset keys a lease held
                       a job back for: a settle that frees one of their
                       slots wakes idle leasers (and takes it out)
=====================  =====================================================

Global keys (single-key commands or single-key scripts only):

=================================  ==========================================
``{ns:meta}:topology``             hash queue -> versions (the queue registry)
``{ns:meta}:paused``               set of paused queues
``{ns:wake}:stream:ready:<queue>``  stream of wake-ups for idle leasers:
                                   an entry (field ``n``: how many jobs)
                                   each time jobs become ready; at least
                                   the newest :data:`WAKE_KEEP` are kept
``{ns:wake}:stream:scheduled:<q>``  stream of wake-ups for sleeping
                                   promoters: an entry (field ``due``: the
                                   producer's estimate of the store time the
                                   job is due) per call that schedules jobs
``{ns:L:<name>}:lead``             leadership hash: holder, epoch, expires_at
``{ns:L:<name>}:fired``            hash schedule id -> last fired time
``{ns:L:<name>}:pending``          hash of triggers recorded but not yet enqueued
``{ns:L:<name>}:damaged``          pending triggers that could not be decoded
``{ns:L:<name>}:schedules``        stored schedules: hash id ->
                                   ``<paused 0|1>|<updated_at>|<definition>``
``{ns:L:<name>}:schedules_v``      their version: one more per applied edit
``{ns:wf:<group>}:g``             a workflow group's member results
                                   (field = index), expiring with the workflow
``{ns:workers}:info``              the worker registry: hash worker id ->
                                   its entry's JSON (``records._workers``)
``{ns:workers}:lapse``             zset worker id -> when its entry lapses
                                   (last beat + ttl, Redis TIME); the two
                                   keys of the registry share one tag, and
                                   each script on them touches that slot only
``{ns:done}``                      pub/sub channel (not a key): the key of a
                                   finished job whose record names it in
                                   field ``w`` (a producer waits on it)
``{ns:agg:<queue>}:<minute>``      hash of a queue's per-minute aggregates
                                   (``_aggregates``): field ``<what>|<kind>``
                                   -> count; expires ``keep`` s after the
                                   minute; a queue's minutes share one slot
=================================  ==========================================

Topology and paused share a tag (one node answers both in one round trip); all
wake-up streams share one tag so one ``XREAD`` can watch many queues on a
Cluster. Wake-ups are streams, read by every waiter (see ``_waiting``), not
lists of tokens that the first blocked client pops. Earlier versions used
lists at ``{ns:wake}:ready:<queue>`` and ``{ns:wake}:scheduled:<queue>``:
names the streams never take, so old and new processes never meet a key of
the other's type (what a mixed fleet gets is in docs/deployment.md).
"""

from __future__ import annotations

import attrs

from ...records._attrs_methods import fields_eq, fields_hash, fields_repr
from ...records._placement import Placement
from .._topology_placement import locate, topology_placement

#: A member kept in every leased zset (score +inf, never a job ID in practice:
#: job hashes are looked up under it and found absent). Being longer than
#: 64 bytes, it makes Redis store the zset as a skiplist instead of a listpack,
#: whose inserts cost O(n) each: for a zset of 64-128 in-flight leases that was
#: the largest cost of lease.lua. Counts of leased jobs exclude it (ZCOUNT to
#: ``(+inf``); scans by expiry never reach it.
#: Each wake-up stream keeps at least its newest this many entries (``XADD
#: MAXLEN ~``: trimmed a whole stream node at a time, so it may hold up to a
#: node more, 100 entries by Redis's default; exact trimming walks the node
#: on every entry, several times the cost of the enqueue it wakes for). A
#: waiter reads at most this many at once; one that gets this many may have
#: missed older ones, and looks instead of trusting them (see ``_waiting``).
WAKE_KEEP = 16
LEASED_SENTINEL = "~leased-index-sentinel~" + "." * 48


def escape(name: str) -> str:
    """Make ``name`` safe inside a hash tag (no braces) and unambiguous."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


@attrs.frozen(eq=False)
class PartitionKeys:
    """The keys of one (queue, version, partition); all share one hash tag.

    Compared and hashed by identity (cheap on the hot path): :class:`KeySpace`
    hands out one instance per partition."""

    __repr__ = fields_repr

    queue: str
    version: int
    partition: int
    #: The placement of the partition's jobs (``(version, partition)``,
    #: shared: see ``store._topology_placement``).
    placement: Placement
    tag: str
    scheduled: str
    ready: str
    leased: str
    retry: str
    succeeded: str
    dead: str
    tokens: str
    closed: str
    damaged: str
    job_prefix: str
    unique_prefix: str
    outbox: str
    aborted: str

    @classmethod
    def build(cls, ns: str, queue: str, version: int, partition: int) -> PartitionKeys:
        tag = f"{{{ns}:q:{escape(queue)}:v{version}:p{partition}}}"
        return cls(
            queue=queue,
            version=version,
            partition=partition,
            placement=topology_placement(version, partition),
            tag=tag,
            scheduled=f"{tag}:scheduled",
            ready=f"{tag}:ready",
            leased=f"{tag}:leased",
            retry=f"{tag}:retry",
            succeeded=f"{tag}:succeeded",
            dead=f"{tag}:dead",
            tokens=f"{tag}:tokens",
            closed=f"{tag}:closed",
            damaged=f"{tag}:damaged",
            job_prefix=f"{tag}:j:",
            unique_prefix=f"{tag}:u:",
            outbox=f"{tag}:outbox",
            aborted=f"{tag}:aborted",
        )

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def gone(self, job_id: str) -> str:
        """The gone key of a deleted workflow job whose outbox entry it
        holds (see ``lua/lib/keep_flow_place.lua``)."""
        return f"{self.tag}:gone:{job_id}"

    @property
    def enqueue_keys(self) -> list[str]:
        """enqueue.lua's KEYS (see its header). The keys only a unique job
        needs (its lock, the retry zset) the script derives from the job
        key prefix: each shares its hash tag, so its slot."""
        return [self.scheduled, self.ready, self.closed, self.job_prefix]

    @property
    def slot_id(self) -> tuple[str, int, int]:
        return (self.queue, self.version, self.partition)


@attrs.frozen
class WorkerKeys:
    """The worker registry's keys; both share one hash tag."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    info: str
    lapse: str


@attrs.frozen
class LeaderKeys:
    """The keys of one leadership name; all share one hash tag."""

    __repr__ = fields_repr
    __eq__ = fields_eq
    __hash__ = fields_hash

    lead: str
    fired: str
    pending: str
    damaged: str
    schedules: str
    schedules_version: str


class KeySpace:
    """Builds (and caches) the keys of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._ns = escape(namespace)
        self.topology = f"{{{self._ns}:meta}}:topology"
        self.paused = f"{{{self._ns}:meta}}:paused"
        self.done_channel = f"{{{self._ns}:done}}"
        self.workers = WorkerKeys(
            info=f"{{{self._ns}:workers}}:info", lapse=f"{{{self._ns}:workers}}:lapse"
        )
        self._partitions: dict[tuple[str, int, int], PartitionKeys] = {}
        self._placed: dict[tuple[str, Placement], PartitionKeys] = {}

    def partition(self, queue: str, version: int, partition: int) -> PartitionKeys:
        """The keys of one partition (cached: the hot path builds no strings)."""
        ident = (queue, version, partition)
        keys = self._partitions.get(ident)
        if keys is None:
            if len(self._partitions) > 100_000:  # bound the cache; rebuilding is cheap
                self._partitions.clear()
            keys = self._partitions[ident] = PartitionKeys.build(
                self._ns, queue, version, partition
            )
        return keys

    def placed(self, queue: str, placement: Placement) -> PartitionKeys:
        """The keys of the partition of ``queue`` where a job of ``placement``
        (one this store made) lives; cached as :meth:`partition`. A placement
        that names no partition (the empty default of a record made by hand,
        or one another store made) is read as version 1, partition 0, where
        a queue's first jobs live: a settle or renewal of a job that is not
        there is refused by its fence, as any stale lease is."""
        ident = (queue, placement)
        keys = self._placed.get(ident)
        if keys is None:
            version, partition = locate(placement) or (1, 0)
            if len(self._placed) > 100_000:  # bound the cache; rebuilding is cheap
                self._placed.clear()
            keys = self._placed[ident] = self.partition(queue, version, partition)
        return keys

    def aggregates(self, queue: str) -> str:
        """The prefix of ``queue``'s per-minute aggregates: the hash of the
        minute starting at epoch second m is this plus m (one slot per queue)."""
        return f"{{{self._ns}:agg:{escape(queue)}}}:"

    def group(self, group_id: str) -> str:
        """A workflow group's hash (its own slot)."""
        return f"{{{self._ns}:wf:{escape(group_id)}}}:g"

    def workflow(self, workflow_id: str) -> str:
        """A workflow's record hash (its own slot, as its groups' ``{ns:wf:<id>.<path>}``
        are in theirs): fields t (tree), c (created), k (first kind), x (cancelled at)."""
        return f"{{{self._ns}:wf:{escape(workflow_id)}}}:w"

    def wake_ready(self, queue: str) -> str:
        """The stream of ``queue``'s ready wake-ups."""
        return f"{{{self._ns}:wake}}:stream:ready:{escape(queue)}"

    def wake_scheduled(self, queue: str) -> str:
        """The stream of ``queue``'s scheduled wake-ups."""
        return f"{{{self._ns}:wake}}:stream:scheduled:{escape(queue)}"

    def leader(self, name: str) -> LeaderKeys:
        tag = f"{{{self._ns}:L:{escape(name)}}}"
        return LeaderKeys(
            lead=f"{tag}:lead",
            fired=f"{tag}:fired",
            pending=f"{tag}:pending",
            damaged=f"{tag}:damaged",
            schedules=f"{tag}:schedules",
            schedules_version=f"{tag}:schedules_v",
        )
