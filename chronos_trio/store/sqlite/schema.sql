-- chronos_trio SQLite store, schema version 7 (PRAGMA user_version; a file of
-- an older version is migrated by _connections.MIGRATIONS).
-- Applied once per file, in one BEGIN IMMEDIATE transaction, by the first
-- process that opens it (see _database.py). Times are REAL epoch seconds on
-- the store's clock (the host's wall clock: one host shares a file). Tables
-- are STRICT, so a column never holds a value of another type.

-- Every job, in every state; the columns are the PostgreSQL store's
-- (store/_rows.py reads both). Live states (scheduled, ready, retry_wait,
-- leased) are what workers touch; the partial indexes cover only them, and
-- a finished job nothing keeps is deleted by its settle.
CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,
    queue            TEXT NOT NULL,
    kind             TEXT NOT NULL,
    payload          BLOB NOT NULL,
    run_at           REAL NOT NULL,
    state            TEXT NOT NULL CHECK (state = 'scheduled' OR state = 'ready' OR state = 'leased' OR state = 'retry_wait' OR state = 'succeeded' OR state = 'dead' OR state = 'aborted'),
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    timeout          REAL NOT NULL,
    lease_token      TEXT NOT NULL DEFAULT '',
    lease_owner      TEXT NOT NULL DEFAULT '',
    lease_expires_at REAL,
    last_error       TEXT NOT NULL DEFAULT '',
    created_at       REAL NOT NULL,
    finished_at      REAL,
    result           BLOB,
    result_until     REAL,
    headers          TEXT NOT NULL DEFAULT '',   -- records._options.encode_headers
    then_step        TEXT,                       -- Job.then (a workflow's next step)
    control          TEXT NOT NULL DEFAULT '',   -- JobControl.encode(), '' for none
    priority         INTEGER NOT NULL DEFAULT 0, -- the control's priority, for the claim order
    unclaimed_since  REAL,
    unique_key       TEXT,                       -- the key this job took (NULL: not unique)
    unique_spec      TEXT,                       -- the Unique it was enqueued with (JSON)
    abort_reason     TEXT NOT NULL DEFAULT '',   -- set by an abort of the leased job
    retain_until     REAL,                       -- a finished job's end of retention
    retained         INTEGER NOT NULL DEFAULT 0, -- listed/counted as succeeded
    discarded        INTEGER NOT NULL DEFAULT 0, -- kept only for result waiters
    continuation     INTEGER NOT NULL DEFAULT 0, -- a workflow continuation to run (outbox)
    version          INTEGER NOT NULL DEFAULT 1, -- its routing version and partition:
    part             INTEGER NOT NULL DEFAULT 0, --   its placement (see queue_versions)
    attempt_history  TEXT,                       -- records._attempts (version 2; NULL: none)
    notes_progress   TEXT,                       -- store._sql_notes (version 3; NULL: none)
    notes_lines      TEXT,                       --   its log lines (NULL: none)
    notes_dropped    INTEGER NOT NULL DEFAULT 0  --   and how many the bound pushed out
) STRICT;

-- State filters are OR chains, never IN lists (see _states.py: SQLite
-- evaluates an IN list by building a temporary table for every row it
-- writes), and queries repeat them verbatim (a partial index serves only a
-- query holding its WHERE term for term).
-- Claims: due jobs of a queue, highest priority first, then due order.
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id)
    WHERE (state = 'ready' OR state = 'scheduled' OR state = 'retry_wait');
-- Idle waiters' next due time per queue.
CREATE INDEX jobs_due ON jobs (queue, run_at) WHERE (state = 'scheduled' OR state = 'retry_wait');
-- Recovery: leases by expiry.
CREATE INDEX jobs_leased ON jobs (queue, lease_expires_at) WHERE state = 'leased';
-- Retention, listing and dead letters: finished jobs by finish time.
CREATE INDEX jobs_finished ON jobs (queue, state, finished_at, id)
    WHERE (state = 'succeeded' OR state = 'dead' OR state = 'aborted');
-- The workflow outbox.
CREATE INDEX jobs_continuation ON jobs (queue, finished_at, id) WHERE continuation = 1;

-- Queue routing versions (TopologyRole), as on PostgreSQL: a queue without
-- rows here has one version, 1, with one partition, active.
CREATE TABLE queue_versions (
    queue      TEXT NOT NULL,
    version    INTEGER NOT NULL CHECK (version >= 1),
    partitions INTEGER NOT NULL CHECK (partitions >= 1),
    state      TEXT NOT NULL CHECK (state = 'active' OR state = 'draining'),
    PRIMARY KEY (queue, version)
) STRICT;
CREATE UNIQUE INDEX queue_versions_active ON queue_versions (queue) WHERE state = 'active';

-- Every queue ever used, and whether it is paused.
CREATE TABLE queues (
    name   TEXT PRIMARY KEY,
    paused INTEGER NOT NULL DEFAULT 0
) STRICT;

-- Unique keys per queue: who holds each, in which mode, until when
-- (expires_at NULL: while its holder is pending).
CREATE TABLE unique_locks (
    queue      TEXT NOT NULL,
    key        TEXT NOT NULL,
    holder     TEXT NOT NULL,
    mode       TEXT NOT NULL,
    expires_at REAL,
    PRIMARY KEY (queue, key)
) STRICT;

-- Rate limits: each key's theoretical arrival time (GCRA).
CREATE TABLE rate_buckets (
    queue TEXT NOT NULL,
    key   TEXT NOT NULL,
    tat   REAL NOT NULL,
    PRIMARY KEY (queue, key)
) STRICT;

-- Concurrency limits: the leased jobs holding a slot of each key.
CREATE TABLE slots (
    queue  TEXT NOT NULL,
    key    TEXT NOT NULL,
    job_id TEXT NOT NULL,
    PRIMARY KEY (queue, key, job_id)
) STRICT;
CREATE INDEX slots_job ON slots (job_id);

-- The worker registry: each entry as records._workers encodes it.
CREATE TABLE workers (
    id         TEXT PRIMARY KEY,
    data       BLOB NOT NULL,
    last_beat  REAL NOT NULL,
    expires_at REAL NOT NULL
) STRICT;

-- Leadership leases: one row per name, its epoch only ever grows (a new
-- holder takes epoch + 1), so a deposed leader's writes are fenced.
CREATE TABLE leaders (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at REAL NOT NULL
) STRICT;

-- Triggers: one row per (leadership name, schedule) holding the last fire
-- time, only ever moved forward (in the transaction that enqueues the
-- job), so each (schedule, fire time) is enqueued at most once.
CREATE TABLE triggers (
    leader    TEXT NOT NULL,
    schedule  TEXT NOT NULL,
    fire_time REAL NOT NULL,
    job_id    TEXT NOT NULL,
    epoch     INTEGER NOT NULL,
    PRIMARY KEY (leader, schedule)
) STRICT;

-- Stored schedules (version 4, store/_sql_schedules.py): edited at run
-- time, per leadership name beside its triggers; the name's version moves
-- up by one per applied edit, so a leader reads one row per tick.
CREATE TABLE schedules (
    leader     TEXT NOT NULL,
    id         TEXT NOT NULL,
    definition TEXT NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL,
    PRIMARY KEY (leader, id)
) STRICT;
CREATE TABLE schedule_versions (
    leader  TEXT PRIMARY KEY,
    version INTEGER NOT NULL
) STRICT;

-- Result waiters (ResultRole.wait_outcome): a finished job nothing keeps
-- but with a live waiter stays readable WAITED_KEEP seconds.
CREATE TABLE result_waiters (
    job_id     TEXT NOT NULL,
    waiter     TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (job_id, waiter)
) STRICT;

-- Workflow groups (FlowRole.group_arrive): one row per group, one per
-- member that arrived.
CREATE TABLE flow_groups (
    id         TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    expires_at REAL NOT NULL
) STRICT;
CREATE TABLE flow_group_members (
    group_id TEXT NOT NULL REFERENCES flow_groups (id) ON DELETE CASCADE,
    idx      INTEGER NOT NULL,
    result   BLOB,
    PRIMARY KEY (group_id, idx)
) STRICT;
CREATE INDEX flow_groups_expiry ON flow_groups (expires_at);

-- Workflow records (WorkflowRole): each started workflow's definition and
-- its cancel mark, until expires_at (an expired row counts as none).
CREATE TABLE workflows (
    id           TEXT PRIMARY KEY,
    tree         TEXT NOT NULL,
    first_kind   TEXT NOT NULL,
    created      REAL NOT NULL,
    cancelled_at REAL,
    expires_at   REAL NOT NULL
) STRICT;
CREATE INDEX workflows_expiry ON workflows (expires_at);
-- Per-minute aggregates (AggregatesRole, store/_sql_aggregates.py; version 6):
-- one row per (queue, minute, kind) of what the workers ran.
CREATE TABLE aggregates (
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    minute INTEGER NOT NULL,
    succeeded INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    b0 INTEGER NOT NULL DEFAULT 0,
    b1 INTEGER NOT NULL DEFAULT 0,
    b2 INTEGER NOT NULL DEFAULT 0,
    b3 INTEGER NOT NULL DEFAULT 0,
    b4 INTEGER NOT NULL DEFAULT 0,
    b5 INTEGER NOT NULL DEFAULT 0,
    b6 INTEGER NOT NULL DEFAULT 0,
    b7 INTEGER NOT NULL DEFAULT 0,
    b8 INTEGER NOT NULL DEFAULT 0,
    b9 INTEGER NOT NULL DEFAULT 0,
    b10 INTEGER NOT NULL DEFAULT 0,
    b11 INTEGER NOT NULL DEFAULT 0,
    b12 INTEGER NOT NULL DEFAULT 0,
    b13 INTEGER NOT NULL DEFAULT 0,
    b14 INTEGER NOT NULL DEFAULT 0,
    b15 INTEGER NOT NULL DEFAULT 0,
    b16 INTEGER NOT NULL DEFAULT 0,
    b17 INTEGER NOT NULL DEFAULT 0,
    b18 INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute, kind)
) STRICT;
CREATE INDEX aggregates_minute ON aggregates (minute);

-- Outbox entries of deleted workflow jobs (version 7, store/_sql_flow_kept.py):
-- a job's end not continued yet, or its failure as deleted, kept until the
-- continuer handled it.
CREATE TABLE flow_kept (
    id          TEXT PRIMARY KEY,
    queue       TEXT NOT NULL,
    then_step   TEXT NOT NULL,
    result      BLOB,
    version     INTEGER NOT NULL,
    part        INTEGER NOT NULL,
    state       TEXT NOT NULL,
    last_error  TEXT NOT NULL,
    attempts    INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    finished_at REAL NOT NULL
) STRICT;
