-- chronos_trio PostgreSQL store, schema version 3: a running job's notes
-- (its latest progress and its newest log lines, store/_sql_notes.py), in
-- columns of its row so they live and die with it. Nullable columns (and a
-- constant default) are added without rewriting the table; code of an
-- older version names its columns, so it reads and writes rows as before.
ALTER TABLE jobs
    ADD COLUMN notes_progress text,
    ADD COLUMN notes_lines text,
    ADD COLUMN notes_dropped integer NOT NULL DEFAULT 0;
