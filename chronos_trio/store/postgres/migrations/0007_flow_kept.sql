-- chronos_trio PostgreSQL store, schema version 7: outbox entries of
-- deleted workflow jobs (store/_sql_flow_kept.py): a job's end not continued
-- yet, or its failure as deleted, kept until the continuer handled it. A new
-- table: code of an older version never reads it (its deletes keep nothing).
CREATE TABLE flow_kept (
    id          text PRIMARY KEY,
    queue       text NOT NULL,
    then_step   text NOT NULL,
    result      bytea,
    version     integer NOT NULL,
    part        integer NOT NULL,
    state       text NOT NULL,
    last_error  text NOT NULL,
    attempts    integer NOT NULL,
    kind        text NOT NULL,
    finished_at float8 NOT NULL
);
