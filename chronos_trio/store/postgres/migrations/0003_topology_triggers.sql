-- chronos_trio PostgreSQL store: versioned queue routing and one trigger
-- row per schedule (numbered after the worker part's migrations).

-- Queue routing versions (TopologyRole). A queue without rows here has one
-- version, 1, with one partition, active: rows appear only when a version
-- is promoted. A partition is a label (the job ID's CRC32 modulo the
-- version's partition count, as on every store), not a physical split: a
-- claim reads a queue's jobs in one order whatever their version.
CREATE TABLE queue_versions (
    queue      text NOT NULL,
    version    integer NOT NULL CHECK (version >= 1),
    partitions integer NOT NULL CHECK (partitions >= 1),
    state      text NOT NULL CHECK (state IN ('active', 'draining')),
    PRIMARY KEY (queue, version)
);
-- Exactly one active version per queue.
CREATE UNIQUE INDEX queue_versions_active ON queue_versions (queue) WHERE state = 'active';

-- Where each job lives: its routing version and partition (its placement).
ALTER TABLE jobs
    ADD COLUMN version integer NOT NULL DEFAULT 1,
    ADD COLUMN part    integer NOT NULL DEFAULT 0;

-- Triggers: one row per (leadership name, schedule) holding the last fire
-- time, only ever moved forward by an upsert that locks the row, so each
-- (schedule, fire time) is enqueued at most once however many leaders race,
-- and the table never grows with time.
DROP TABLE triggers;
CREATE TABLE triggers (
    leader    text NOT NULL,
    schedule  text NOT NULL,
    fire_time float8 NOT NULL,
    job_id    text NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (leader, schedule)
);
