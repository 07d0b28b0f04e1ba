-- chronos_trio PostgreSQL store, schema version 1.
-- Runs with search_path set to the store's schema (see _migrate.py); names
-- are unqualified. Times are float8 epoch seconds on the server's clock
-- (chronos_now()), as every store's times are on its own clock.

CREATE FUNCTION chronos_now() RETURNS float8
    LANGUAGE sql VOLATILE
    AS $$ SELECT extract(epoch FROM clock_timestamp())::float8 $$;

-- Every job, in every state. Live states (scheduled, ready, retry_wait,
-- leased) are what workers touch; the partial indexes cover only them, so
-- finished rows (kept for retention, results or dead letters) never slow a
-- claim, and a finished job nothing keeps is deleted by its settle.
CREATE TABLE jobs (
    id               text PRIMARY KEY,
    queue            text NOT NULL,
    kind             text NOT NULL,
    payload          bytea NOT NULL,
    run_at           float8 NOT NULL,
    state            text NOT NULL CHECK (state IN
                         ('scheduled', 'ready', 'leased', 'retry_wait',
                          'succeeded', 'dead', 'aborted')),
    attempts         integer NOT NULL DEFAULT 0,
    max_retries      integer NOT NULL,
    timeout          float8 NOT NULL,
    lease_token      text NOT NULL DEFAULT '',
    lease_owner      text NOT NULL DEFAULT '',
    lease_expires_at float8,
    last_error       text NOT NULL DEFAULT '',
    created_at       float8 NOT NULL,
    finished_at      float8,
    result           bytea,
    result_until     float8,
    headers          text NOT NULL DEFAULT '',   -- records._options.encode_headers
    then_step        text,                       -- Job.then (a workflow's next step)
    control          text NOT NULL DEFAULT '',   -- JobControl.encode(), '' for none
    priority         integer NOT NULL DEFAULT 0, -- the control's priority, for the claim order
    unclaimed_since  float8,
    unique_key       text,                       -- the key this job took (None: not unique)
    unique_spec      text,                       -- the Unique it was enqueued with (JSON)
    abort_reason     text NOT NULL DEFAULT '',   -- set by an abort of the leased job
    retain_until     float8,                     -- a finished job's end of retention
    retained         boolean NOT NULL DEFAULT false, -- listed/counted as succeeded
    discarded        boolean NOT NULL DEFAULT false, -- kept only for result waiters
    continuation     boolean NOT NULL DEFAULT false  -- a workflow continuation to run (outbox)
) WITH (fillfactor = 80);

-- Claims: due jobs of a queue, highest priority first, then due order.
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id)
    WHERE state IN ('ready', 'scheduled', 'retry_wait');
-- Recovery: leases by expiry.
CREATE INDEX jobs_leased ON jobs (queue, lease_expires_at)
    WHERE state = 'leased';
-- Retention, listing and dead letters: finished jobs by finish time.
CREATE INDEX jobs_finished ON jobs (queue, state, finished_at, id)
    WHERE state IN ('succeeded', 'dead', 'aborted');
-- The workflow outbox.
CREATE INDEX jobs_continuation ON jobs (queue, finished_at, id)
    WHERE continuation;

-- A job table churns: every job is inserted, updated two or more times and
-- deleted. Vacuum it after 1% of its rows changed (the default 20% lets a
-- large table bloat for long), analyse it after 2%.
ALTER TABLE jobs SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 1
);

-- Every queue ever used, and whether it is paused.
CREATE TABLE queues (
    name   text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);

-- Unique keys per queue: who holds each, in which mode, until when
-- (expires_at NULL: while its holder is pending).
CREATE TABLE unique_locks (
    queue      text NOT NULL,
    key        text NOT NULL,
    holder     text NOT NULL,
    mode       text NOT NULL,
    expires_at float8,
    PRIMARY KEY (queue, key)
);

-- Rate limits: each key's theoretical arrival time (GCRA).
CREATE TABLE rate_buckets (
    queue text NOT NULL,
    key   text NOT NULL,
    tat   float8 NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Concurrency limits: the leased jobs holding a slot of each key.
CREATE TABLE slots (
    queue  text NOT NULL,
    key    text NOT NULL,
    job_id text NOT NULL,
    PRIMARY KEY (queue, key, job_id)
);
CREATE INDEX slots_job ON slots (job_id);

-- The worker registry: each entry as records._workers encodes it.
CREATE TABLE workers (
    id         text PRIMARY KEY,
    data       bytea NOT NULL,
    last_beat  float8 NOT NULL,
    expires_at float8 NOT NULL
);

-- Leadership leases: one row per name, its epoch only ever grows (a new
-- holder takes epoch + 1), so a deposed leader's writes are fenced.
CREATE TABLE leaders (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    epoch      bigint NOT NULL,
    expires_at float8 NOT NULL
);

-- Schedule triggers fired: unique by (schedule, fire time), so two leaders
-- can never fire one trigger twice.
CREATE TABLE triggers (
    schedule  text NOT NULL,
    fire_time float8 NOT NULL,
    job_id    text NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (schedule, fire_time)
);
