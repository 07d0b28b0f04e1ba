-- chronos_trio PostgreSQL store, schema version 5: workflow records
-- (WorkflowRole): each started workflow's definition and its cancel mark,
-- kept until expires_at (store clock); an expired row counts as none and is
-- replaced by the next start of its ID (a few lapsed ones are removed by
-- each save). A new table: code of an older version never reads it.
CREATE TABLE workflows (
    id           text PRIMARY KEY,
    tree         text NOT NULL,
    first_kind   text NOT NULL,
    created      float8 NOT NULL,
    cancelled_at float8,
    expires_at   float8 NOT NULL
);
CREATE INDEX workflows_expiry ON workflows (expires_at);
