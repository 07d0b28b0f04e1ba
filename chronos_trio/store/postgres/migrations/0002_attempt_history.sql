-- chronos_trio PostgreSQL store, schema version 2: attempt history.
-- Each job keeps the attempts that ended without success (retried, dead,
-- expired, aborted, released...), written by the settle or recovery that
-- ends them: one line each, the last 20 (records/_attempts.py). NULL: none
-- (every row written before this version). A nullable column without a
-- default is added without rewriting the table, and code of version 1
-- names its columns, so it reads and writes rows as before.
ALTER TABLE jobs ADD COLUMN attempt_history text;
