-- chronos_trio PostgreSQL store, schema version 6: per-minute aggregates
-- (AggregatesRole, store/_sql_aggregates.py): one row per (queue, minute,
-- kind) of what the workers ran; rows older than the workers' keep are
-- deleted by their adds (by the minute index). A new table: code of an
-- older version never touches it.
CREATE TABLE aggregates (
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    minute bigint NOT NULL,
    succeeded bigint NOT NULL DEFAULT 0,
    failed bigint NOT NULL DEFAULT 0,
    retried bigint NOT NULL DEFAULT 0,
    b0 bigint NOT NULL DEFAULT 0,
    b1 bigint NOT NULL DEFAULT 0,
    b2 bigint NOT NULL DEFAULT 0,
    b3 bigint NOT NULL DEFAULT 0,
    b4 bigint NOT NULL DEFAULT 0,
    b5 bigint NOT NULL DEFAULT 0,
    b6 bigint NOT NULL DEFAULT 0,
    b7 bigint NOT NULL DEFAULT 0,
    b8 bigint NOT NULL DEFAULT 0,
    b9 bigint NOT NULL DEFAULT 0,
    b10 bigint NOT NULL DEFAULT 0,
    b11 bigint NOT NULL DEFAULT 0,
    b12 bigint NOT NULL DEFAULT 0,
    b13 bigint NOT NULL DEFAULT 0,
    b14 bigint NOT NULL DEFAULT 0,
    b15 bigint NOT NULL DEFAULT 0,
    b16 bigint NOT NULL DEFAULT 0,
    b17 bigint NOT NULL DEFAULT 0,
    b18 bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute, kind)
);
CREATE INDEX aggregates_minute ON aggregates (minute);
