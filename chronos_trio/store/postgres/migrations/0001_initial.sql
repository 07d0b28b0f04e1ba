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
    continuation     boolean NOT NULL DEFAULT false, -- a workflow continuation to run (outbox)
    version          integer NOT NULL DEFAULT 1,     -- its routing version and partition:
    part             integer NOT NULL DEFAULT 0      --   its placement (see queue_versions)
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

-- Triggers: one row per (leadership name, schedule) holding the last fire
-- time, only ever moved forward by an upsert that locks the row, so each
-- (schedule, fire time) is enqueued at most once however many leaders race,
-- and the table never grows with time.
CREATE TABLE triggers (
    leader    text NOT NULL,
    schedule  text NOT NULL,
    fire_time float8 NOT NULL,
    job_id    text NOT NULL,
    epoch     bigint NOT NULL,
    PRIMARY KEY (leader, schedule)
);

-- == The worker path ==
-- Every function is created with SET search_path FROM CURRENT, so it works on
-- any connection whatever its search_path (transactional enqueue calls
-- chronos_enqueue, schema-qualified, on the caller's own connection).

-- The one LISTEN/NOTIFY channel of this schema (channel names are
-- database-wide). Payloads: 'r' || queue (a job may have become ready or due
-- earlier, or a concurrency slot came back), 'd' || job id (a job with
-- result waiters finished or went), 'c' (the workflow outbox was filled).
CREATE FUNCTION chronos_channel() RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path FROM CURRENT
    AS $$ SELECT CASE WHEN length(current_schema()) <= 54
                      THEN 'chronos_' || current_schema()
                      ELSE 'chronos_' || md5(current_schema()) END $$;

-- Idle waiters' next due time per queue (a store without a promoter
-- returns from wait_ready by then): scheduled and retry_wait jobs by due
-- time. Ready jobs are not in it, so an enqueue of a due job pays nothing.
CREATE INDEX jobs_due ON jobs (queue, run_at) WHERE state IN ('scheduled', 'retry_wait');

-- Result waiters (ResultRole.wait_outcome): registered before the waiter
-- reads the job, under a share lock of its row, so a settle (which locks the
-- row first) either sees the waiter or finished before the read. A finished
-- job nothing keeps but with a live waiter stays readable WAITED_KEEP
-- seconds (as on the MemoryStore); its finish notifies 'd' || id.
CREATE TABLE result_waiters (
    job_id     text NOT NULL,
    waiter     text NOT NULL,
    expires_at float8 NOT NULL,
    PRIMARY KEY (job_id, waiter)
);

-- Workflow groups (FlowRole.group_arrive): one row per group, one per
-- member that arrived.
CREATE TABLE flow_groups (
    id         text PRIMARY KEY,
    size       integer NOT NULL,
    expires_at float8 NOT NULL
);
CREATE TABLE flow_group_members (
    group_id text NOT NULL REFERENCES flow_groups (id) ON DELETE CASCADE,
    idx      integer NOT NULL,
    result   bytea,
    PRIMARY KEY (group_id, idx)
);
CREATE INDEX flow_groups_expiry ON flow_groups (expires_at);

-- Enqueue a batch: p_jobs is a JSON array with one object per job, in
-- order (keys: id, queue, kind, payload (base64), run_at (null: now +
-- delay), delay, max_retries, timeout, headers, then, control, priority,
-- expires_in, unique_key, unique_mode, unique_ttl, hash; see _enqueue.py):
-- one parameter, whatever the batch, so a caller's driver adapts one text
-- value rather than an array per field. One row per job (ord = its index
-- from 1): the job ID that holds it (the job's own, or a unique key's
-- holder), whether it was created, its due time, and where it lives
-- (version, part): a created job at its queue's active version
-- (queue_versions; 1 for a queue never promoted) and the partition hash
-- (its ID's CRC32, from the caller) modulo that version's partition count.
--
-- A job whose ID exists (any state) is left alone (created false, its due
-- time). A due job (run_at <= now; run_at null: now + max(0, delay)) is
-- ready, others scheduled. A unique job (unique_key not null) is judged
-- as memory/_unique.py judges it, under a transaction-scoped advisory lock
-- of (schema, queue, key). control is the stored flow control without
-- its expiry; expires_in (not null) appends 'e' || (now + it). Each
-- queue of the batch is registered, and gets ONE notification per call
-- (none per row).
CREATE FUNCTION chronos_enqueue(p_jobs jsonb)
RETURNS TABLE (ord integer, job_id text, created boolean, run_at float8,
               version integer, part integer)
    LANGUAGE plpgsql VOLATILE
    SET search_path FROM CURRENT
    SET extra_float_digits = 1
    AS $$
#variable_conflict use_column
DECLARE
    v_now      float8 := chronos_now();
    v_run_at   float8;
    v_state    text;
    v_control  text;
    v_key      text;
    v_mode     text;
    v_lock     record;
    v_holder   record;
    v_pending  boolean;
    v_claim    text;
    v_ver      integer;
    v_part     integer;
    v_woken    text[] := '{}';
    v_route    record;
    v_job      record;
    v_queues   text[] := ARRAY(SELECT DISTINCT e ->> 'queue'
                                FROM jsonb_array_elements(p_jobs) AS e);
    v_routed   boolean;
BEGIN
    v_routed := EXISTS (SELECT 1 FROM queue_versions v
                        WHERE v.queue = ANY (v_queues) AND v.state = 'active');
    INSERT INTO queues (name)
        SELECT q FROM unnest(v_queues) AS q
        ON CONFLICT DO NOTHING;
    -- A batch without unique jobs and without a repeated ID (the bulk case):
    -- one set-based INSERT ... ON CONFLICT DO NOTHING, the same rules as the
    -- loop below (an existing ID is left alone and reported with its due
    -- time and place; the statement's snapshot shows only rows that existed
    -- before it).
    IF NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_jobs) AS e
                   WHERE e ->> 'unique_key' IS NOT NULL)
       AND (SELECT count(DISTINCT e ->> 'id') FROM jsonb_array_elements(p_jobs) AS e)
           = jsonb_array_length(p_jobs) THEN
        FOR v_job IN
            WITH x AS (
                SELECT y.*, coalesce(y.run_at, v_now + greatest(0.0, coalesce(y.delay, 0.0)))
                           AS due,
                       coalesce(v.version, 1) AS ver,
                       CASE WHEN v.version IS NULL THEN 0
                            ELSE (coalesce(y.hash, 0) % v.partitions)::integer END AS prt
                FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
                         id text, queue text, kind text, payload text, run_at float8,
                         delay float8, max_retries integer, timeout float8, headers text,
                         "then" text, control text, priority integer, expires_in float8,
                         hash bigint))
                     WITH ORDINALITY AS y (id, queue, kind, payload, run_at, delay,
                                           max_retries, timeout, headers, "then", control,
                                           priority, expires_in, hash, n)
                LEFT JOIN queue_versions v ON v_routed AND v.queue = y.queue
                                              AND v.state = 'active'
            ),
            ins AS (
                INSERT INTO jobs AS j (id, queue, kind, payload, run_at, state, max_retries,
                                       timeout, created_at, headers, then_step, control,
                                       priority, version, part)
                SELECT x.id, x.queue, x.kind, decode(x.payload, 'base64'), x.due,
                       CASE WHEN x.due <= v_now THEN 'ready' ELSE 'scheduled' END,
                       x.max_retries, x.timeout, v_now, coalesce(x.headers, ''), x."then",
                       CASE WHEN x.expires_in IS NULL THEN coalesce(x.control, '')
                            ELSE coalesce(x.control, '')
                                 || CASE WHEN coalesce(x.control, '') = '' THEN '' ELSE E'\n' END
                                 || 'e' || (v_now + x.expires_in)::text END,
                       coalesce(x.priority, 0), x.ver, x.prt
                FROM x ORDER BY x.n
                ON CONFLICT (id) DO NOTHING
                RETURNING j.id, j.run_at, j.version, j.part
            )
            SELECT x.n::integer AS i, x.id, x.queue, ins.id IS NOT NULL AS made,
                   coalesce(ins.run_at, prev.run_at, 0.0) AS due,
                   coalesce(ins.version, prev.version, 1) AS ver,
                   coalesce(ins.part, prev.part, 0) AS prt
            FROM x LEFT JOIN ins ON ins.id = x.id
                   LEFT JOIN jobs prev ON ins.id IS NULL AND prev.id = x.id
            ORDER BY x.n
        LOOP
            ord := v_job.i;
            job_id := v_job.id;
            created := v_job.made;
            run_at := v_job.due;
            version := v_job.ver;
            part := v_job.prt;
            IF v_job.made AND NOT v_job.queue = ANY (v_woken) THEN
                v_woken := v_woken || v_job.queue;
            END IF;
            RETURN NEXT;
        END LOOP;
        PERFORM pg_notify(chronos_channel(), 'r' || q) FROM unnest(v_woken) AS q;
        RETURN;
    END IF;
    FOR v_job IN
        SELECT x.*, x.n::integer AS i
        FROM ROWS FROM (jsonb_to_recordset(p_jobs) AS (
                 id text, queue text, kind text, payload text, run_at float8, delay float8,
                 max_retries integer, timeout float8, headers text, "then" text,
                 control text, priority integer, expires_in float8, unique_key text,
                 unique_mode text, unique_ttl float8, hash bigint))
             WITH ORDINALITY AS x (id, queue, kind, payload, run_at, delay, max_retries,
                                   timeout, headers, "then", control, priority, expires_in,
                                   unique_key, unique_mode, unique_ttl, hash, n)
    LOOP
        ord := v_job.i;
        job_id := v_job.id;
        SELECT j.run_at, j.version, j.part INTO v_holder FROM jobs j WHERE j.id = v_job.id;
        IF FOUND THEN
            created := false;
            run_at := coalesce(v_holder.run_at, 0.0);
            version := v_holder.version;
            part := v_holder.part;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_run_at := coalesce(v_job.run_at, v_now + greatest(0.0, coalesce(v_job.delay, 0.0)));
        v_state := CASE WHEN v_run_at <= v_now THEN 'ready' ELSE 'scheduled' END;
        v_control := coalesce(v_job.control, '');
        IF v_job.expires_in IS NOT NULL THEN
            v_control := v_control || CASE WHEN v_control = '' THEN '' ELSE E'\n' END
                         || 'e' || (v_now + v_job.expires_in)::text;
        END IF;
        v_key := v_job.unique_key;
        v_mode := v_job.unique_mode;
        IF v_key IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(hashtextextended(
                'chronos_unique:' || current_schema() || E'\x1f' || v_job.queue || E'\x1f' || v_key,
                0));
            v_claim := 'store';
            SELECT l.holder, l.mode, l.expires_at INTO v_lock
                FROM unique_locks l WHERE l.queue = v_job.queue AND l.key = v_key;
            IF FOUND AND (v_lock.expires_at IS NULL OR v_lock.expires_at > v_now) THEN
                SELECT j.id, j.state, j.run_at, j.version, j.part INTO v_holder
                    FROM jobs j WHERE j.id = v_lock.holder FOR UPDATE;
                v_pending := FOUND AND v_holder.state IN ('scheduled', 'ready', 'leased', 'retry_wait');
                IF NOT v_pending THEN
                    IF v_lock.mode = 'throttle' AND v_lock.expires_at IS NOT NULL THEN
                        v_claim := 'duplicate';
                    END IF;
                ELSIF v_mode = 'debounce' THEN
                    IF v_holder.state IN ('scheduled', 'ready', 'retry_wait') THEN
                        v_claim := 'replace';
                    END IF;
                ELSE
                    v_claim := 'duplicate';
                END IF;
            END IF;
            IF v_claim = 'duplicate' THEN
                job_id := v_lock.holder;
                created := false;
                run_at := CASE WHEN v_holder.id IS NULL THEN 0.0 ELSE v_holder.run_at END;
                version := coalesce(v_holder.version, 1);
                part := coalesce(v_holder.part, 0);
                RETURN NEXT;
                CONTINUE;
            ELSIF v_claim = 'replace' THEN
                UPDATE jobs j SET payload = decode(v_job.payload, 'base64'), headers = coalesce(v_job.headers, ''),
                                  run_at = v_run_at, state = v_state
                    WHERE j.id = v_holder.id;
                IF NOT v_job.queue = ANY (v_woken) THEN
                    v_woken := v_woken || v_job.queue;
                END IF;
                job_id := v_holder.id;
                created := false;
                run_at := v_run_at;
                version := v_holder.version;
                part := v_holder.part;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        v_ver := 1;
        v_part := 0;
        IF v_routed THEN
            SELECT v.version, v.partitions INTO v_route FROM queue_versions v
                WHERE v.queue = v_job.queue AND v.state = 'active';
            IF FOUND THEN
                v_ver := v_route.version;
                v_part := (coalesce(v_job.hash, 0) % v_route.partitions)::integer;
            END IF;
        END IF;
        INSERT INTO jobs AS j (id, queue, kind, payload, run_at, state, max_retries, timeout,
                               created_at, headers, then_step, control, priority,
                               unique_key, unique_spec, version, part)
            VALUES (v_job.id, v_job.queue, v_job.kind, decode(v_job.payload, 'base64'), v_run_at, v_state,
                    v_job.max_retries, v_job.timeout, v_now, coalesce(v_job.headers, ''),
                    v_job."then", v_control, coalesce(v_job.priority, 0), v_key,
                    CASE WHEN v_key IS NULL THEN NULL
                         ELSE json_build_object('mode', v_mode, 'ttl', v_job.unique_ttl)::text END,
                    v_ver, v_part)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN  -- a concurrent enqueue stored this ID first
            SELECT j.run_at, j.version, j.part INTO v_holder FROM jobs j WHERE j.id = v_job.id;
            created := false;
            run_at := coalesce(v_holder.run_at, 0.0);
            version := coalesce(v_holder.version, 1);
            part := coalesce(v_holder.part, 0);
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_key IS NOT NULL THEN
            INSERT INTO unique_locks AS l (queue, key, holder, mode, expires_at)
                VALUES (v_job.queue, v_key, v_job.id, v_mode,
                        CASE WHEN v_job.unique_ttl IS NOT NULL AND v_mode <> 'throttle'
                             THEN v_now + v_job.unique_ttl END)
                ON CONFLICT (queue, key) DO UPDATE
                    SET holder = EXCLUDED.holder, mode = EXCLUDED.mode,
                        expires_at = EXCLUDED.expires_at;
        END IF;
        IF NOT v_job.queue = ANY (v_woken) THEN
            v_woken := v_woken || v_job.queue;
        END IF;
        created := true;
        run_at := v_run_at;
        version := v_ver;
        part := v_part;
        RETURN NEXT;
    END LOOP;
    PERFORM pg_notify(chronos_channel(), 'r' || q) FROM unnest(v_woken) AS q;
END
$$;

-- Record group arrivals (FlowRole.group_arrive), in order: per arrival the
-- members' results in member order once all have arrived, else NULL
-- (complete false). A group past its expiry starts afresh; every arrival
-- keeps it p_ttl more seconds; a member's second arrival changes nothing.
CREATE FUNCTION chronos_group_arrive(
    p_groups text[], p_indexes integer[], p_sizes integer[], p_results bytea[], p_ttl float8
) RETURNS TABLE (ord integer, complete boolean, results bytea[])
    LANGUAGE plpgsql VOLATILE
    SET search_path FROM CURRENT
    AS $$
#variable_conflict use_column
DECLARE
    v_now   float8 := chronos_now();
    v_group record;
    v_size  integer;
    v_have  integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_groups, 1), 0) LOOP
        ord := i;
        SELECT g.size, g.expires_at INTO v_group FROM flow_groups g
            WHERE g.id = p_groups[i] FOR UPDATE;
        IF NOT FOUND THEN
            INSERT INTO flow_groups (id, size, expires_at)
                VALUES (p_groups[i], p_sizes[i], v_now + p_ttl);
            v_size := p_sizes[i];
        ELSIF v_group.expires_at <= v_now THEN
            DELETE FROM flow_group_members m WHERE m.group_id = p_groups[i];
            UPDATE flow_groups g SET size = p_sizes[i], expires_at = v_now + p_ttl
                WHERE g.id = p_groups[i];
            v_size := p_sizes[i];
        ELSE
            UPDATE flow_groups g SET expires_at = v_now + p_ttl WHERE g.id = p_groups[i];
            v_size := v_group.size;
        END IF;
        INSERT INTO flow_group_members (group_id, idx, result)
            VALUES (p_groups[i], p_indexes[i], p_results[i])
            ON CONFLICT DO NOTHING;
        SELECT count(*) INTO v_have FROM flow_group_members m WHERE m.group_id = p_groups[i];
        IF v_have >= v_size THEN
            complete := true;
            SELECT array_agg(m.result ORDER BY k.k) INTO results
                FROM generate_series(0, v_size - 1) AS k (k)
                LEFT JOIN flow_group_members m ON m.group_id = p_groups[i] AND m.idx = k.k;
        ELSE
            complete := false;
            results := NULL;
        END IF;
        RETURN NEXT;
    END LOOP;
    -- forget a few lapsed groups (bounded work per call)
    DELETE FROM flow_groups g WHERE g.id IN (
        SELECT g2.id FROM flow_groups g2 WHERE g2.expires_at <= v_now LIMIT 100);
END
$$;
