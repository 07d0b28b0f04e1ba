-- chronos_trio PostgreSQL store, schema version 4: schedules kept in the
-- store and edited at run time (ScheduleStoreRole, store/_sql_schedules.py),
-- per leadership name beside its triggers. New tables only: code of an
-- older version never reads them.
CREATE TABLE schedules (
    leader     text NOT NULL,
    id         text NOT NULL,
    definition text NOT NULL,
    paused     integer NOT NULL DEFAULT 0,
    updated_at float8 NOT NULL,
    PRIMARY KEY (leader, id)
);

-- One row per leadership name: its version, one more per applied edit (a
-- leader reads only this row per tick, and the schedules when it moved).
CREATE TABLE schedule_versions (
    leader  text PRIMARY KEY,
    version bigint NOT NULL
);
