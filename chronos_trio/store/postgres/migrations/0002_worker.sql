-- chronos_trio PostgreSQL store, schema version 2: the worker path.
-- Runs with search_path set to the store's schema (see _migrate.py). Every
-- function is created with SET search_path FROM CURRENT, so it works on any
-- connection whatever its search_path (transactional enqueue calls
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

-- Enqueue a batch: one element per job in every array, in order; one row
-- per job (ord = its index from 1): the job ID that holds it (the job's own,
-- or a unique key's holder), whether it was created, its due time.
--
-- A job whose ID exists (any state) is left alone (created false, its due
-- time). A due job (run_at <= now; run_at NULL: now + max(0, delay)) is
-- ready, others scheduled. A unique job (p_unique_keys[i] not NULL) is judged
-- as memory/_unique.py judges it, under a transaction-scoped advisory lock
-- of (schema, queue, key). p_controls[i] is the stored flow control without
-- its expiry; p_expires_in[i] (not NULL) appends 'e' || (now + it). Each
-- queue of the batch is registered, and gets ONE notification per call
-- (none per row).
CREATE FUNCTION chronos_enqueue(
    p_ids text[], p_queues text[], p_kinds text[], p_payloads bytea[],
    p_run_ats float8[], p_delays float8[], p_max_retries integer[], p_timeouts float8[],
    p_headers text[], p_thens text[], p_controls text[], p_priorities integer[],
    p_expires_in float8[], p_unique_keys text[], p_unique_modes text[], p_unique_ttls float8[]
) RETURNS TABLE (ord integer, job_id text, created boolean, run_at float8)
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
    v_existing float8;
    v_woken    text[] := '{}';
BEGIN
    INSERT INTO queues (name)
        SELECT DISTINCT q FROM unnest(p_queues) AS q
        ON CONFLICT DO NOTHING;
    FOR i IN 1 .. coalesce(array_length(p_ids, 1), 0) LOOP
        ord := i;
        job_id := p_ids[i];
        SELECT j.run_at INTO v_existing FROM jobs j WHERE j.id = p_ids[i];
        IF FOUND THEN
            created := false;
            run_at := coalesce(v_existing, 0.0);
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_run_at := coalesce(p_run_ats[i], v_now + greatest(0.0, coalesce(p_delays[i], 0.0)));
        v_state := CASE WHEN v_run_at <= v_now THEN 'ready' ELSE 'scheduled' END;
        v_control := coalesce(p_controls[i], '');
        IF p_expires_in[i] IS NOT NULL THEN
            v_control := v_control || CASE WHEN v_control = '' THEN '' ELSE E'\n' END
                         || 'e' || (v_now + p_expires_in[i])::text;
        END IF;
        v_key := p_unique_keys[i];
        v_mode := p_unique_modes[i];
        IF v_key IS NOT NULL THEN
            PERFORM pg_advisory_xact_lock(hashtextextended(
                'chronos_unique:' || current_schema() || E'\x1f' || p_queues[i] || E'\x1f' || v_key,
                0));
            v_claim := 'store';
            SELECT l.holder, l.mode, l.expires_at INTO v_lock
                FROM unique_locks l WHERE l.queue = p_queues[i] AND l.key = v_key;
            IF FOUND AND (v_lock.expires_at IS NULL OR v_lock.expires_at > v_now) THEN
                SELECT j.id, j.state, j.run_at INTO v_holder
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
                RETURN NEXT;
                CONTINUE;
            ELSIF v_claim = 'replace' THEN
                UPDATE jobs j SET payload = p_payloads[i], headers = coalesce(p_headers[i], ''),
                                  run_at = v_run_at, state = v_state
                    WHERE j.id = v_holder.id;
                IF NOT p_queues[i] = ANY (v_woken) THEN
                    v_woken := v_woken || p_queues[i];
                END IF;
                job_id := v_holder.id;
                created := false;
                run_at := v_run_at;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        INSERT INTO jobs AS j (id, queue, kind, payload, run_at, state, max_retries, timeout,
                               created_at, headers, then_step, control, priority,
                               unique_key, unique_spec)
            VALUES (p_ids[i], p_queues[i], p_kinds[i], p_payloads[i], v_run_at, v_state,
                    p_max_retries[i], p_timeouts[i], v_now, coalesce(p_headers[i], ''),
                    p_thens[i], v_control, coalesce(p_priorities[i], 0), v_key,
                    CASE WHEN v_key IS NULL THEN NULL
                         ELSE json_build_object('mode', v_mode, 'ttl', p_unique_ttls[i])::text END)
            ON CONFLICT (id) DO NOTHING;
        IF NOT FOUND THEN  -- a concurrent enqueue stored this ID first
            SELECT j.run_at INTO v_existing FROM jobs j WHERE j.id = p_ids[i];
            created := false;
            run_at := coalesce(v_existing, 0.0);
            RETURN NEXT;
            CONTINUE;
        END IF;
        IF v_key IS NOT NULL THEN
            INSERT INTO unique_locks AS l (queue, key, holder, mode, expires_at)
                VALUES (p_queues[i], v_key, p_ids[i], v_mode,
                        CASE WHEN p_unique_ttls[i] IS NOT NULL AND v_mode <> 'throttle'
                             THEN v_now + p_unique_ttls[i] END)
                ON CONFLICT (queue, key) DO UPDATE
                    SET holder = EXCLUDED.holder, mode = EXCLUDED.mode,
                        expires_at = EXCLUDED.expires_at;
        END IF;
        IF NOT p_queues[i] = ANY (v_woken) THEN
            v_woken := v_woken || p_queues[i];
        END IF;
        created := true;
        run_at := v_run_at;
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
