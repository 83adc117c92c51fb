-- Every SQL statement outlast runs, by name. store/ is the only place that speaks SQL.
-- Writes about a run that a worker owns carry its fencing token: `fencing_token = %(token)s`.
-- Facts several statements share are functions of migration 0015, inlined by Postgres (a plan is
-- the one the fact spelled out would have): outlast_final, outlast_unfinished (states),
-- outlast_live (a worker), outlast_window (a tenant's window), outlast_redone (a lost-ack re-check).
-- Claims, leases and due times read the time as `(SELECT at FROM outlast_now())` (0018_clock: the
-- database clock plus the schema's offset, moved by tests); audit stamps and heartbeats, as now().

-- name: schema_version
-- The version migrate recorded, and the oldest code (by the version it knows) that may run on it.
SELECT key, value FROM outlast_meta WHERE key IN ('schema_version', 'oldest_code');

-- name: record_version
INSERT INTO outlast_meta (key, value) VALUES ('schema_version', %(version)s), ('oldest_code', %(oldest)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;

-- name: lock_timeout
-- A migration's statements give way after this long waiting for a lock (migrate.LOCK_WAIT).
SELECT set_config('lock_timeout', %(ms)s, %(local)s);

-- name: has_runs
-- Whether the schema holds a run: a `transaction: none` migration of a schema with none runs in one
-- transaction, its indexes built at once (docs/upgrading.md).
SELECT EXISTS (SELECT 1 FROM runs) AS yes;

-- name: invalid_index
-- An index of the schema that a concurrent build left invalid (it gave way, or its migrate died).
SELECT 1 AS invalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = %(index)s AND NOT i.indisvalid
  AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema());

-- name: workers_say_code
-- Whether workers say which schema version their code knows (0022 on).
SELECT 1 AS yes WHERE to_regclass('worker_code') IS NOT NULL;

-- name: older_workers
-- Live workers whose code knows fewer migrations than %(needs)s (none said: code before 0022).
SELECT w.name, c.code_version FROM workers w LEFT JOIN worker_code c USING (name)
WHERE outlast_live(w.last_beat, w.lease_ttl) AND coalesce(c.code_version, 0) < %(needs)s ORDER BY w.name;

-- name: insert_run
-- The run, its budget and its 'enqueued' event in one statement (one commit): a run never exists
-- without the limits it was given. A delayed run starts at %(start_at)s or %(start_in)s seconds
-- from now (the database clock); its deadline counts from its start.
WITH s AS (SELECT coalesce(%(start_at)s::timestamptz, (SELECT at FROM outlast_now()) + make_interval(secs => %(start_in)s)) AS start_at),
r AS (
    INSERT INTO runs (id, workflow, queue, input, input_hash, program, deadline, parent_id, budget_id,
                      trace_context, start_at, published_at, priority, tenant)
    SELECT %(id)s, %(workflow)s, %(queue)s, %(input)s, %(input_hash)s, %(program)s,
           coalesce(%(deadline_at)s, greatest((SELECT at FROM outlast_now()), s.start_at) + make_interval(secs => %(deadline_in)s)),
           %(parent_id)s, %(budget_id)s, %(trace_context)s, s.start_at,
           CASE WHEN s.start_at > (SELECT at FROM outlast_now()) THEN s.start_at  -- see 0010_time: the sweeper publishes it then
                WHEN %(tenant)s::text IS NULL OR %(window)s = 0 THEN (SELECT at FROM outlast_now())
                -- its tenant's window is full, or older runs of the tenant wait: held (0014_fair)
                WHEN EXISTS (SELECT 1 FROM runs h WHERE h.state = 'queued' AND h.published_at IS NULL
                                 AND h.queue = %(queue)s AND h.tenant = %(tenant)s) THEN NULL
                WHEN (SELECT used FROM outlast_window(%(queue)s, %(tenant)s, %(window)s, NULL)) >= %(window)s THEN NULL
                ELSE (SELECT at FROM outlast_now()) END,
           %(priority)s, %(tenant)s
    FROM s
    ON CONFLICT (id) DO NOTHING
    RETURNING *),
b AS (
    INSERT INTO budgets (budget_id, name, limit_value)
    SELECT r.budget_id, l.name, l.amount
    FROM r, unnest(%(budget_names)s::text[], %(budget_limits)s::numeric[]) AS l(name, amount)
    WHERE r.budget_id = r.id),
e AS (
    INSERT INTO events (run_id, kind, detail)
    SELECT r.id, 'enqueued', jsonb_build_object('workflow', r.workflow, 'queue', r.queue) FROM r)
SELECT * FROM r;

-- name: get_run
SELECT * FROM runs WHERE id = %(id)s;

-- name: list_runs
-- The latest runs; each filter applies when given.
SELECT * FROM runs WHERE (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)
  AND (%(age)s::float8 IS NULL OR created_at >= now() - make_interval(secs => %(age)s))
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s)
ORDER BY created_at DESC LIMIT %(limit)s;

-- name: add_event
-- Under the run row's lock, as every other event is written (with the run's own change): the
-- ids of a run's events then follow the order of their commits, which `follow` relies on (it
-- resumes after the last id it saw), and a watcher registering meanwhile waits for it.
-- Run again after a lost acknowledgement, it finds its event by %(write_id)s (drawn once per
-- event by its caller) and returns its id instead of adding a second one.
WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s FOR NO KEY UPDATE),
was AS (SELECT id FROM events WHERE run_id = %(run_id)s AND write_id = %(write_id)s),
e AS (
    INSERT INTO events (run_id, kind, detail, write_id)
    SELECT id, %(kind)s, %(detail)s, %(write_id)s FROM r WHERE NOT EXISTS (SELECT 1 FROM was)
    RETURNING id)
SELECT id FROM e
UNION ALL
SELECT id FROM was;

-- name: events
SELECT id, run_id, at, kind, detail FROM events WHERE run_id = %(run_id)s AND id > %(after)s ORDER BY id;

-- name: claim
-- One conditional UPDATE takes the lease: a queued run, one whose lease expired, one that
-- waits for a worker serving its program, or one whose deadline passed. The database clock sets
-- the expiry. A tenant's run taken makes room in its tenant's window (0014_fair): the tenant's
-- next held run is published in the same statement (turn_id; the claimer adds its stream entry,
-- else the sweeper does).
WITH c AS (
    UPDATE runs SET
        state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'running' END,
        reason = NULL,
        fencing_token = fencing_token + 1,
        owner = %(worker)s,
        lease_expires_at = (SELECT at FROM outlast_now()) + make_interval(secs => %(ttl)s),
        attempts = attempts + 1,
        started_at = coalesce(started_at, now()),  -- first taken: set once (0020, the runs list)
        program = coalesce(program, %(programs)s::jsonb ->> workflow),
        published_at = coalesce(published_at, (SELECT at FROM outlast_now())),  -- a held run's stray entry: no longer held
        updated_at = now()
    WHERE id = %(id)s AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      AND (program IS NULL OR program = %(programs)s::jsonb ->> workflow)
      AND ((state = 'queued' AND (start_at IS NULL OR start_at <= (SELECT at FROM outlast_now())))
           OR (state IN ('running', 'cancelling') AND lease_expires_at < (SELECT at FROM outlast_now()))
           OR (state = 'cancelling' AND lease_expires_at IS NULL)
           OR (state = 'waiting' AND (reason = 'program_changed' OR wake_at <= (SELECT at FROM outlast_now())))
           OR (state = 'awaiting_approval' AND wake_at <= (SELECT at FROM outlast_now()))
           -- its deadline passed while nothing ran: ended by the executor (its partial handler)
           OR (state IN ('queued', 'waiting', 'awaiting_approval') AND deadline <= (SELECT at FROM outlast_now())))
    RETURNING *, (SELECT at FROM outlast_now()) AS db_now),
turn AS (
    SELECT h.id FROM c CROSS JOIN LATERAL (
        SELECT id FROM runs h
        WHERE h.state = 'queued' AND h.published_at IS NULL AND h.queue = c.queue
          AND h.tenant = c.tenant AND h.id <> c.id
        ORDER BY CASE h.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END, h.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED) h
    WHERE c.tenant IS NOT NULL AND %(window)s > 0
      AND (SELECT used FROM outlast_window(c.queue, c.tenant, %(window)s, c.id)) < %(window)s),
released AS (
    UPDATE runs SET published_at = (SELECT at FROM outlast_now()) FROM turn
    WHERE runs.id = turn.id AND runs.published_at IS NULL
    RETURNING runs.id, runs.priority)
SELECT c.*, released.id AS turn_id, released.priority AS turn_priority
FROM c LEFT JOIN released ON true;

-- name: renew
-- One statement renews every lease a worker holds, locking the runs in id order (as every write
-- does). Each held run comes back: renewed; lost (a newer token exists: another worker took it);
-- or neither (it ended, final or waiting, under this very token: not a lost lease).
WITH held AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(id, token)),
mine AS (
    SELECT runs.id FROM runs JOIN held ON runs.id = held.id AND runs.fencing_token = held.token
    WHERE runs.state IN ('running', 'cancelling')
    ORDER BY runs.id COLLATE "C"  -- the writer's order (code points), whatever the database's
    FOR NO KEY UPDATE OF runs),
renewed AS (
    UPDATE runs SET lease_expires_at = (SELECT at FROM outlast_now()) + make_interval(secs => %(ttl)s)
    FROM mine WHERE runs.id = mine.id
    RETURNING runs.id, runs.cancel_requested),
slots_renewed AS (
    -- the concurrency slots held under these leases live as long as they do (0011_flow)
    UPDATE slots SET expires_at = (SELECT at FROM outlast_now()) + make_interval(secs => %(ttl)s)
    FROM renewed, held
    WHERE slots.run_id = renewed.id AND held.id = renewed.id AND slots.token = held.token)
SELECT held.id, renewed.id IS NOT NULL AS renewed,
       coalesce(renewed.cancel_requested, false) AS cancel_requested,
       runs.fencing_token IS DISTINCT FROM held.token AS lost
FROM held LEFT JOIN renewed ON renewed.id = held.id LEFT JOIN runs ON runs.id = held.id;

-- name: append
-- The run row keeps the chain's head; entries are written only by the lease holder, in order. One
-- statement writes one entry, or several (results held for a moment, then the entry that carries
-- them): all of them or none, numbered in order up to %(seq)s. %(seq)s and %(hash)s are the last
-- entry's.
-- Run again after a commit whose acknowledgement was lost, it finds its own last entry (same seq,
-- same hash, token still held) and says so instead of failing.
WITH r AS (
    -- a new entry is progress: the claims counted towards max_attempts start again from this one
    UPDATE runs SET journal_head = %(hash)s, journal_len = %(seq)s, attempts = 1, updated_at = now()
    WHERE id = %(run_id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
      AND journal_len = %(seq)s - cardinality(%(kinds)s::text[])
    RETURNING id, cancel_requested),
ins AS (
    INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
    SELECT r.id, %(seq)s - cardinality(%(kinds)s::text[]) + e.n, e.kind, e.op_id, e.body, e.hash
    FROM r, unnest(%(kinds)s::text[], %(op_ids)s::text[], %(bodies)s::text[], %(hashes)s::text[])
         WITH ORDINALITY AS e(kind, op_id, body, hash, n)
    RETURNING seq)
SELECT seq, (SELECT cancel_requested FROM r) AS cancel_requested FROM ins
UNION ALL
SELECT j.seq, runs.cancel_requested FROM journal j JOIN runs ON runs.id = j.run_id
WHERE j.run_id = %(run_id)s AND j.seq = %(seq)s AND j.hash = %(hash)s
  AND runs.fencing_token = %(token)s;

-- name: append_unowned
-- An entry written by a person or code (a resolution) while no worker holds the run: it must
-- be waiting for exactly that, and the chain must not have moved since it was read. Run again
-- after a commit whose acknowledgement was lost, it finds its own entry (same seq, same hash:
-- chained to the head it was read after, with its own body) and says so instead of failing.
WITH r AS (
    UPDATE runs SET journal_head = %(hash)s, journal_len = %(seq)s, state = 'queued',
        reason = NULL, attempts = 0, published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id = %(run_id)s AND state = 'waiting' AND reason = %(reason)s
      AND journal_len = %(seq)s - 1 AND journal_head = %(prev)s
    RETURNING id, cancel_requested),
ins AS (
    INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
    SELECT id, %(seq)s, %(kind)s, %(op_id)s, %(body)s, %(hash)s FROM r
    RETURNING seq)
SELECT seq, (SELECT cancel_requested FROM r) AS cancel_requested FROM ins
UNION ALL
SELECT j.seq, runs.cancel_requested FROM journal j JOIN runs ON runs.id = j.run_id
WHERE j.run_id = %(run_id)s AND j.seq = %(seq)s AND j.hash = %(hash)s;

-- name: journal
SELECT seq, kind, op_id, body, hash FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: finish
-- Run again after a lost acknowledgement, it finds the run already in that state under its token.
-- Only on the journal the worker chained (%(journal_len)s entries): the results it held are
-- written in the same shared commit, just before; if they were not, nor is the final state.
WITH r AS (
    UPDATE runs SET state = %(state)s, reason = %(reason)s, result = %(result)s, error = %(error)s,
        owner = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
      AND journal_len = %(journal_len)s
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, %(state)s, %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, %(state)s, %(reason)s);

-- name: wait
-- A durable wait: the lease is given up and the run no longer counts as crashing its worker.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = %(reason)s, owner = NULL, lease_expires_at = NULL,
        attempts = 0, wake_at = %(wake_at)s, published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'waiting', %(reason)s);

-- name: refuse_unclaimed
-- A worker that cannot serve a run's program says so, without taking the run: a queued run, one
-- whose worker died (its lease expired), or a waiting one come due (a timer, a child, a slot, a
-- rate window), while no live worker serves its program (as `program_served` says, looked at
-- again here: a run that came due after that look, its worker still up, is not parked).
-- %(program)s is the program this worker serves.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'program_changed', owner = NULL, lease_expires_at = NULL,
        published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id = %(id)s AND program IS DISTINCT FROM %(program)s
      AND ((state = 'queued' AND (start_at IS NULL OR start_at <= (SELECT at FROM outlast_now())))
           OR (state = 'running' AND lease_expires_at < (SELECT at FROM outlast_now()))
           OR (state = 'waiting' AND wake_at <= (SELECT at FROM outlast_now())))
      AND NOT EXISTS (
          SELECT 1 FROM workers
          WHERE outlast_live(last_beat, lease_ttl)
            AND runs.queue = ANY (queues) AND programs ->> runs.workflow = runs.program)
      AND NOT EXISTS (
          SELECT 1 FROM served_programs s
          WHERE s.queue = runs.queue AND s.workflow = runs.workflow AND s.program = runs.program
            AND s.last_seen >= now() - make_interval(secs => %(within)s))
    RETURNING id)
INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r
RETURNING run_id;

-- name: release
-- Graceful hand-over: the lease ends now and the claim does not count as a crash. Only a lease
-- held (a held run has an expiry): a run handed over already under this token, `cancelling`, is
-- not handed over twice. Run again after a lost acknowledgement, it finds the run handed over
-- under its token (queued, or cancelling with no lease).
WITH r AS (
    UPDATE runs SET state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'queued' END,
        owner = NULL, lease_expires_at = NULL,
        attempts = greatest(attempts - 1, 0), published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
      AND lease_expires_at IS NOT NULL
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'handed_over', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'queued', NULL)
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'cancelling', NULL) WHERE lease_expires_at IS NULL;

-- name: requeue
-- An operator's resume of a waiting run; with accept_program the run adopts the serving program.
-- The wait resumed is the one the operator saw: %(token)s, the run's token then (a claim since
-- makes a new one). Run again after a lost acknowledgement, it finds the run queued under it.
WITH r AS (
    UPDATE runs SET state = 'queued', reason = NULL, attempts = 0, published_at = (SELECT at FROM outlast_now()),
        updated_at = now(),
        program = CASE WHEN %(accept_program)s THEN NULL ELSE program END
    WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'waiting'
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'resumed', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'queued', NULL);

-- name: unseen
-- The sweeper, before `due`: the clock its pass stamps by, and whether a queued run went unseen
-- for %(after)s seconds by it: only such a run may be one whose entry still waits in its stream,
-- which Redis is asked about (`Queue.waiting`), so it is asked only when there is one.
SELECT (SELECT at FROM outlast_now()) AS now, EXISTS (
    SELECT 1 FROM runs WHERE state = 'queued'
      AND published_at < (SELECT at FROM outlast_now()) - make_interval(secs => %(after)s)) AS queued;

-- name: due
-- The sweeper: runs that need a worker and that no stream entry may deliver. SKIP LOCKED and
-- the published_at stamp let every worker sweep at once without publishing a run twice.
-- A queued run whose entry is still in its stream is not due, however long it waited (a long
-- backlog; queue/undelivered.py): one of %(waiting)s (their entries read around the delivered
-- point: delivered and not acknowledged yet, or not delivered), or one stamped within its
-- stream's span: per stream (queue, level), the ages by Redis's clock, read before this
-- statement, of the newest entry delivered or deleted (since) and of the newest entry added
-- (last). An entry is added after its run is stamped, so a run stamped since then by this
-- statement's clock has its entry waiting, if it was ever added; one that was not (a producer's
-- crash) waits for the group to deliver past it, then is due. With %(queued)s false (`unseen`
-- found none, Redis was not asked), no queued run is due by age.
WITH span AS MATERIALIZED (  -- once, not per run (each run's look a scan of a few rows)
    SELECT u.queue, u.priority,
           (SELECT at FROM outlast_now()) - make_interval(secs => u.since) AS since,
           (SELECT at FROM outlast_now()) - make_interval(secs => u.last) AS last
    FROM unnest(%(queues)s::text[], %(priorities)s::text[], %(since)s::float8[], %(last)s::float8[])
         AS u(queue, priority, since, last)),
near AS (SELECT unnest(%(waiting)s::text[]) AS id),
due AS (
    SELECT id FROM runs
    WHERE outlast_unfinished(state)
      -- one pass of the sweeper never sees again what it stamped itself
      AND published_at < coalesce(%(cutoff)s::timestamptz, 'infinity')
      AND ((published_at < (SELECT at FROM outlast_now()) - make_interval(secs => %(after)s)
            AND ((state = 'queued' AND %(queued)s AND runs.id NOT IN (SELECT near.id FROM near) AND NOT EXISTS (
                     SELECT 1 FROM span
                     WHERE span.queue = runs.queue AND span.priority = runs.priority
                       AND runs.published_at > span.since AND runs.published_at < span.last))
                 OR (state IN ('running', 'cancelling') AND lease_expires_at < (SELECT at FROM outlast_now()))
                 OR (state = 'cancelling' AND lease_expires_at IS NULL)
                 OR (state = 'waiting' AND reason = 'program_changed')))
           -- a delayed run came due (its published_at is its start until this stamps it)
           OR (state = 'queued' AND start_at <= (SELECT at FROM outlast_now()) AND published_at <= start_at)
           -- a timer or an approval's expiry came due: wake it at once, then again while unseen
           OR (state IN ('waiting', 'awaiting_approval') AND wake_at <= (SELECT at FROM outlast_now())
               AND published_at < greatest(wake_at, (SELECT at FROM outlast_now()) - make_interval(secs => %(after)s))))
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE runs SET published_at = (SELECT at FROM outlast_now()) FROM due WHERE runs.id = due.id
RETURNING runs.id, runs.queue, runs.priority;

-- name: turns
-- The sweeper tops up every tenant's window (0014_fair): a tenant's held runs are published while
-- it has fewer than %(window)s runs published and not started in that queue (a claim's own
-- release lost with its worker, a window emptied by cancellations, a larger window configured).
-- A %(window)s of 0 (fair share off) publishes every held run.
WITH RECURSIVE lanes AS (
    -- the (queue, tenant) pairs with held runs, one index probe each (not a scan of every held run)
    (SELECT queue, tenant FROM runs WHERE state = 'queued' AND published_at IS NULL
     ORDER BY queue, tenant LIMIT 1)
    UNION ALL
    SELECT n.queue, n.tenant FROM lanes l CROSS JOIN LATERAL (
        SELECT queue, tenant FROM runs
        WHERE state = 'queued' AND published_at IS NULL AND (queue, tenant) > (l.queue, l.tenant)
        ORDER BY queue, tenant LIMIT 1) n),
turn AS (
    SELECT h.id FROM lanes l CROSS JOIN LATERAL (
        SELECT id FROM runs h
        WHERE h.state = 'queued' AND h.published_at IS NULL AND h.queue = l.queue
          AND h.tenant = l.tenant
        ORDER BY CASE h.priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END, h.created_at
        LIMIT CASE WHEN %(window)s = 0 THEN NULL ELSE greatest(0, %(window)s - (
            SELECT used FROM outlast_window(l.queue, l.tenant, %(window)s, NULL))) END
        FOR UPDATE SKIP LOCKED) h
    LIMIT %(limit)s)
UPDATE runs SET published_at = (SELECT at FROM outlast_now()) FROM turn WHERE runs.id = turn.id AND runs.published_at IS NULL
RETURNING runs.id, runs.queue, runs.priority;

-- name: expire_deadlines
-- A deadline that passed while nothing ran: the run is stamped published, to be published at once
-- (queue, priority), so that a worker claims it and ends it through the executor (its partial
-- handler runs); one still not ended %(grace)s seconds past its deadline (no worker serves its
-- workflow, or its entry was lost) is ended here, timed_out (queue NULL).
WITH late AS (
    SELECT id, deadline < (SELECT at FROM outlast_now()) - make_interval(secs => %(grace)s) AS overdue FROM runs
    WHERE deadline < (SELECT at FROM outlast_now())
      AND (state IN ('queued', 'waiting', 'awaiting_approval')
           OR (state IN ('running', 'cancelling') AND lease_expires_at < (SELECT at FROM outlast_now()))
           OR (state = 'cancelling' AND lease_expires_at IS NULL))
      AND (published_at IS NULL OR published_at < deadline
           OR deadline < (SELECT at FROM outlast_now()) - make_interval(secs => %(grace)s))
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
ended AS (
    UPDATE runs SET state = 'timed_out', reason = 'deadline passed', owner = NULL,
        lease_expires_at = NULL, finished_at = now(), updated_at = now()
    FROM late WHERE runs.id = late.id AND late.overdue
    RETURNING runs.id),
e AS (INSERT INTO events (run_id, kind, detail)
      SELECT id, 'timed_out', '{"reason": "deadline passed"}' FROM ended),
published AS (
    UPDATE runs SET published_at = (SELECT at FROM outlast_now())
    FROM late WHERE runs.id = late.id AND NOT late.overdue
    RETURNING runs.id, runs.queue, runs.priority)
SELECT id AS run_id, NULL::text AS queue, NULL::text AS priority FROM ended
UNION ALL
SELECT id, queue, priority FROM published;

-- name: db_now
-- The clock of claims, leases and due times (0018_clock), and the database's own (audit stamps).
SELECT (SELECT at FROM outlast_now()) AS now, now() AS wall;

-- name: await_approval
-- The request becomes visible together with the run's wait: a decision can only find a run
-- that is really waiting for it. On a replay the existing request (and its expiry) stands.
WITH r AS (
    UPDATE runs SET state = 'awaiting_approval', reason = 'approval', owner = NULL,
        lease_expires_at = NULL, attempts = 0, published_at = (SELECT at FROM outlast_now()), updated_at = now(),
        wake_at = coalesce(
            (SELECT expires_at FROM approvals WHERE run_id = %(run_id)s AND op_id = %(op_id)s),
            (SELECT at FROM outlast_now()) + make_interval(secs => %(expires_in)s))
    WHERE id = %(run_id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
    RETURNING id),
a AS (
    INSERT INTO approvals (id, run_id, op_id, action, args, args_hash, policy_version, approvers, expires_at,
                           authenticated)
    SELECT %(id)s, r.id, %(op_id)s, %(action)s, %(args)s, %(args_hash)s, %(policy_version)s,
           %(approvers)s, (SELECT at FROM outlast_now()) + make_interval(secs => %(expires_in)s), %(authenticated)s
    FROM r
    ON CONFLICT (run_id, op_id) DO NOTHING),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'awaiting_approval', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL  -- run again after a lost acknowledgement: already waiting under this token
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, 'awaiting_approval', 'approval');

-- name: get_approval
SELECT *, (expires_at IS NOT NULL AND expires_at <= (SELECT at FROM outlast_now())) AS expired FROM approvals
WHERE run_id = %(run_id)s AND op_id = %(op_id)s;

-- name: approvals
SELECT *, (expires_at IS NOT NULL AND expires_at <= (SELECT at FROM outlast_now())) AS expired FROM approvals
WHERE run_id = %(run_id)s ORDER BY created_at;

-- name: decide
-- The decision is committed, and the run woken, in one statement; only a pending, unexpired
-- request takes a decision.
WITH a AS (
    UPDATE approvals SET status = %(status)s, decided_by = %(by)s, comment = %(comment)s,
        new_args = %(new_args)s, decided_at = now(), decided_by_detail = %(who)s
    WHERE run_id = %(run_id)s AND op_id = %(op_id)s AND status = 'pending'
      AND (expires_at IS NULL OR expires_at > (SELECT at FROM outlast_now()))
      AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s AND state = 'awaiting_approval')
    RETURNING run_id),
r AS (
    UPDATE runs SET state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'queued' END,
        reason = NULL, published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id IN (SELECT run_id FROM a) AND state = 'awaiting_approval'
    RETURNING id, queue),
e AS (
    INSERT INTO events (run_id, kind, detail) SELECT run_id, 'decision', %(detail)s FROM a)
SELECT a.run_id, r.queue FROM a LEFT JOIN r ON true
UNION ALL  -- run again after a lost acknowledgement: this very decision taken, its run to publish
SELECT d.run_id, w.queue FROM approvals d
LEFT JOIN runs w ON w.id = d.run_id AND w.state IN ('queued', 'cancelling')  -- not taken yet
WHERE d.run_id = %(run_id)s AND d.op_id = %(op_id)s AND d.status = %(status)s
  AND d.decided_by = %(by)s AND d.comment = %(comment)s AND d.new_args IS NOT DISTINCT FROM %(new_args)s
  AND d.decided_by_detail = %(who)s;

-- name: reserve
-- One conditional statement reserves every named estimate or none: the budget rows are locked,
-- checked at their latest values, and only then updated, so two concurrent dispatches can never
-- spend the same remainder.
-- A name this operation already holds (reserved before a crash, then retried) is not reserved again.
WITH est AS (
    SELECT * FROM unnest(%(names)s::text[], %(amounts)s::numeric[]) AS e(name, amount)
    WHERE e.name NOT IN (
        SELECT name FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s)),
locked AS (
    SELECT b.name, b.limit_value, b.spent, b.reserved FROM budgets b JOIN est USING (name)
    WHERE b.budget_id = %(budget_id)s ORDER BY b.name COLLATE "C" FOR UPDATE),
over AS (
    SELECT locked.name, locked.limit_value, locked.spent, locked.reserved, est.amount
    FROM locked JOIN est USING (name)
    WHERE locked.spent + locked.reserved + est.amount > locked.limit_value),
upd AS (
    UPDATE budgets b SET reserved = b.reserved + est.amount FROM est
    WHERE b.budget_id = %(budget_id)s AND b.name = est.name AND NOT EXISTS (SELECT 1 FROM over)
    RETURNING b.name, est.amount),
ins AS (
    INSERT INTO reservations (budget_id, run_id, op_id, name, amount)
    SELECT %(budget_id)s, %(run_id)s, %(op_id)s, name, amount FROM upd)
SELECT name, limit_value, spent, reserved, amount FROM over;

-- name: settle
-- The operation's reservation is replaced by the actual use, once: the reservation rows are
-- deleted here, and a settlement that finds none of the rows it expected (a superseded worker's,
-- after the new owner settled) spends nothing. The spending writes the operation's `settlements`
-- row (0017): a settle of the same operation run again (after a lost acknowledgement, with or
-- without an expected reservation) finds it, spends nothing and says settled; a reservation it
-- finds all the same is released.
WITH gone AS (
    DELETE FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s
    RETURNING name, amount),
was AS (SELECT run_id FROM settlements WHERE run_id = %(run_id)s AND op_id = %(op_id)s),
done AS (
    INSERT INTO settlements (run_id, op_id)
    SELECT %(run_id)s, %(op_id)s
    WHERE NOT EXISTS (SELECT 1 FROM was) AND (NOT %(expected)s OR EXISTS (SELECT 1 FROM gone))
    ON CONFLICT (run_id, op_id) DO NOTHING
    RETURNING run_id),
used AS (
    SELECT a.name, a.actual FROM unnest(%(names)s::text[], %(actual)s::numeric[]) AS a(name, actual)),
u AS (
    SELECT coalesce(used.name, gone.name) AS name, coalesce(used.actual, 0) AS actual,
           coalesce(gone.amount, 0) AS reserved
    FROM used FULL JOIN gone ON used.name = gone.name),
b AS (
    UPDATE budgets b SET reserved = greatest(b.reserved - u.reserved, 0),
        spent = b.spent + CASE WHEN EXISTS (SELECT 1 FROM done) THEN u.actual ELSE 0 END
    FROM u
    WHERE b.budget_id = %(budget_id)s AND b.name = u.name
      AND (EXISTS (SELECT 1 FROM done) OR u.reserved <> 0))
SELECT run_id FROM done
UNION ALL
SELECT run_id FROM was;

-- name: reservations
SELECT name, amount FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s;

-- name: budget
SELECT name, limit_value, spent, reserved FROM budgets WHERE budget_id = %(budget_id)s ORDER BY name;

-- name: cancel
-- A queued run that never started is cancelled at once, and so is one that waits because it cannot
-- be resumed (no worker could replay it to run compensations); any other unfinished run is marked,
-- and one that no worker holds goes to `cancelling` so that a worker runs its compensations.
-- Run again after a lost acknowledgement, it finds its event by %(write_id)s (drawn once per
-- request by its caller): nothing is written twice, and the caller is told the run's state now.
WITH was AS (SELECT id FROM events WHERE run_id = %(id)s AND write_id = %(write_id)s),
r AS (
    UPDATE runs SET cancel_requested = true, updated_at = now(),
        state = CASE
            WHEN state = 'queued' AND journal_len = 0 THEN 'cancelled'
            WHEN state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible')
                THEN 'cancelled'
            WHEN state IN ('queued', 'waiting', 'awaiting_approval') THEN 'cancelling'
            ELSE state END,
        reason = CASE
            WHEN state = 'queued' AND journal_len = 0 THEN 'cancelled before it started'
            WHEN state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible')
                THEN 'cancelled while it could not be resumed (' || reason || '): no compensation ran'
            ELSE reason END,
        finished_at = CASE WHEN (state = 'queued' AND journal_len = 0) OR
                                (state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible'))
                           THEN now() ELSE finished_at END,
        published_at = (SELECT at FROM outlast_now())
    WHERE id = %(id)s
      AND NOT outlast_final(state)
      AND NOT EXISTS (SELECT 1 FROM was)
    RETURNING id, state, queue),
e AS (
    INSERT INTO events (run_id, kind, detail, write_id)
    SELECT id, 'cancel_requested', %(detail)s, %(write_id)s FROM r)
SELECT id, state, queue FROM r
UNION ALL
SELECT id, state, queue FROM runs WHERE id = %(id)s AND EXISTS (SELECT 1 FROM was);

-- name: journal_times
SELECT seq, created_at FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: run_gauges
-- For the metrics gauges, every few seconds: the runs waiting on an unresolved in-doubt operation;
-- the longest a running run has gone without progress (updated_at: its claim or its last journal
-- entry, never a lease renewal). Both read through runs_by_state.
SELECT (SELECT count(*) FROM runs WHERE state = 'waiting' AND reason = 'in_doubt') AS in_doubt,
       coalesce(extract(epoch FROM now() - (
           SELECT min(updated_at) FROM runs WHERE state IN ('running', 'cancelling'))), 0) AS stalled;

-- Fleet: the workers' heartbeat records, queue figures from Postgres, dead letters requeued.

-- name: beat_worker
-- One statement per heartbeat: the worker's record, made at its first beat, all of it taken
-- from the beat (a worker restarted under a fixed name: a new pid, and started again).
-- With it, the schema version its code knows (0022: a contract waits for older workers to go).
WITH w AS (
    INSERT INTO workers (name, host, pid, queues, programs, concurrency, lease_ttl, runs_held,
                         tool_threads, tool_threads_busy)
    VALUES (%(worker)s, %(host)s, %(pid)s, %(queues)s, %(programs)s, %(concurrency)s, %(lease_ttl)s,
            %(runs_held)s, %(tool_threads)s, %(tool_threads_busy)s)
    ON CONFLICT (name) DO UPDATE SET
        host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, programs = EXCLUDED.programs,
        concurrency = EXCLUDED.concurrency, lease_ttl = EXCLUDED.lease_ttl, runs_held = EXCLUDED.runs_held,
        tool_threads = EXCLUDED.tool_threads, tool_threads_busy = EXCLUDED.tool_threads_busy,
        started_at = CASE WHEN (workers.host, workers.pid) = (EXCLUDED.host, EXCLUDED.pid)
                          THEN workers.started_at ELSE now() END,
        last_beat = now()
    RETURNING name)
INSERT INTO worker_code (name, code_version) SELECT name, %(code_version)s FROM w
ON CONFLICT (name) DO UPDATE SET code_version = EXCLUDED.code_version;

-- name: forget_worker
DELETE FROM workers WHERE name = %(worker)s;

-- name: forget_gone_workers
-- Records of workers silent for longer than %(after)s seconds (never fewer than ten TTLs).
DELETE FROM workers
WHERE last_beat < now() - make_interval(secs => greatest(%(after)s, 10 * lease_ttl))
RETURNING name;

-- name: workers
-- With the schema version each worker's code knows (none: code older than 0022).
SELECT w.*, c.code_version, outlast_live(w.last_beat, w.lease_ttl) AS live,
       extract(epoch FROM now() - w.last_beat) AS beat_age
FROM workers w LEFT JOIN worker_code c USING (name) ORDER BY w.host, w.started_at, w.name;

-- name: unfinished_by_queue
-- Unfinished runs per queue and state (the partial index over unfinished runs); and as 'held', the
-- queued runs waiting for their tenant's turn (0014_fair).
SELECT queue, state, count(*) AS n FROM runs
WHERE outlast_unfinished(state)
GROUP BY queue, state
UNION ALL
SELECT queue, 'held', count(*) FROM runs WHERE state = 'queued' AND published_at IS NULL GROUP BY queue;

-- name: requeue_dead_letter
-- Postgres first: an unfinished run named by a dead letter is stamped as published now (the
-- sweeper leaves it be) with an event; a final run is left alone (no row: drop the letter).
-- Run again after a lost acknowledgement, it finds its event by %(write_id)s and tells where the
-- run is now, with no second stamp or event (a run final since: no row, as for any final run).
WITH was AS (SELECT id FROM events WHERE run_id = %(id)s AND write_id = %(write_id)s),
r AS (
    UPDATE runs SET published_at = (SELECT at FROM outlast_now())
    WHERE id = %(id)s
      AND outlast_unfinished(state)
      AND NOT EXISTS (SELECT 1 FROM was)
    RETURNING id, queue, state, priority),
e AS (
    INSERT INTO events (run_id, kind, detail, write_id)
    SELECT id, 'requeued', %(detail)s, %(write_id)s FROM r)
SELECT queue, state, priority FROM r
UNION ALL
SELECT queue, state, priority FROM runs
WHERE id = %(id)s AND outlast_unfinished(state) AND EXISTS (SELECT 1 FROM was);

-- The dashboard: counts, the approvals inbox, and a change mark for its live updates.

-- name: count_by_state
-- Runs counted by state, each only up to %(most)s + 1 (a count past %(most)s is shown as more):
-- at most that many entries of runs_by_state read per state, whatever the table's size. Every
-- runs page, /api/runs call and live refresh counts: a count of every run read the whole table
-- (60 ms at 500k runs). Oldest first (the index read backward): their pages are the likeliest to
-- be all visible, so the count reads the index alone.
SELECT s AS state,
       (SELECT count(*) FROM (SELECT FROM runs WHERE state = s ORDER BY created_at, id LIMIT %(most)s + 1) AS f) AS n
FROM unnest(%(states)s::text[]) AS s;

-- name: pending_approvals
-- Every request still waiting for a decision, oldest first, with the seconds left before expiry.
SELECT a.*, (a.expires_at IS NOT NULL AND a.expires_at <= (SELECT at FROM outlast_now())) AS expired,
       extract(epoch FROM a.expires_at - (SELECT at FROM outlast_now())) AS seconds_left, r.workflow, r.queue
FROM approvals a JOIN runs r ON r.id = a.run_id
WHERE a.status = 'pending' AND r.state = 'awaiting_approval'
ORDER BY a.created_at LIMIT %(limit)s;

-- name: change_mark
-- The events' sequence: it moves whenever anything happens to any run (read, never advanced).
SELECT last_value, is_called FROM events_id_seq;
-- Retention: `outlast prune` and the sweeper (OUTLAST_RETENTION).

-- name: prune
-- One batch of finished runs deleted with everything that is theirs, in one statement (one
-- transaction). A run that another run continues stays until that one is gone (batches go from
-- the newest of a chain up), so a budget goes only with the last run sharing it. With
-- %(exclusive)s one pruner of this schema at a time: the others find nothing to do.
WITH doomed AS (
    SELECT id FROM runs r
    WHERE finished_at < %(before)s
      AND outlast_final(state)
      AND (%(state)s::text IS NULL OR state = %(state)s)
      AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = r.id)
      -- a child whose parent is not final yet: the parent may still read its result
      AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = r.started_by
                      AND outlast_unfinished(p.state))
      AND (NOT %(exclusive)s
           OR (SELECT pg_try_advisory_xact_lock(hashtext(current_schema() || ':outlast-prune'))))
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED),
j AS (DELETE FROM journal WHERE run_id IN (SELECT id FROM doomed) RETURNING 1),
e AS (DELETE FROM events WHERE run_id IN (SELECT id FROM doomed) RETURNING 1),
a AS (DELETE FROM approvals WHERE run_id IN (SELECT id FROM doomed) RETURNING 1),
v AS (DELETE FROM reservations WHERE run_id IN (SELECT id FROM doomed) RETURNING 1),
s AS (DELETE FROM settlements WHERE run_id IN (SELECT id FROM doomed)),
r AS (DELETE FROM runs WHERE id IN (SELECT id FROM doomed) RETURNING id, budget_id),
b AS (
    DELETE FROM budgets WHERE budget_id IN (SELECT budget_id FROM r)
      AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.budget_id = budgets.budget_id
                      AND o.id NOT IN (SELECT id FROM r))
    RETURNING budget_id)
SELECT (SELECT count(*) FROM r) AS runs, (SELECT count(*) FROM j) AS journal,
       (SELECT count(*) FROM e) AS events, (SELECT count(*) FROM a) AS approvals,
       (SELECT count(*) FROM v) AS reservations, (SELECT count(DISTINCT budget_id) FROM b) AS budgets;

-- name: prune_count
-- What `prune` would delete, counted: the finished runs of the cutoff and state, but not one
-- continued by a run that stays, nor (up the chain) what that one continues.
WITH RECURSIVE candidate AS (
    SELECT id, parent_id FROM runs
    WHERE finished_at < %(before)s
      AND outlast_final(state)
      AND (%(state)s::text IS NULL OR state = %(state)s)
      AND NOT EXISTS (SELECT 1 FROM runs p WHERE p.id = runs.started_by
                      AND outlast_unfinished(p.state))),
kept (id) AS (
    SELECT parent_id FROM runs WHERE parent_id IS NOT NULL AND id NOT IN (SELECT id FROM candidate)
    UNION
    SELECT c.parent_id FROM candidate c JOIN kept ON c.id = kept.id WHERE c.parent_id IS NOT NULL),
doomed AS (SELECT id FROM candidate WHERE id NOT IN (SELECT id FROM kept))
SELECT (SELECT count(*) FROM doomed) AS runs,
       (SELECT count(*) FROM journal WHERE run_id IN (SELECT id FROM doomed)) AS journal,
       (SELECT count(*) FROM events WHERE run_id IN (SELECT id FROM doomed)) AS events,
       (SELECT count(*) FROM approvals WHERE run_id IN (SELECT id FROM doomed)) AS approvals,
       (SELECT count(*) FROM reservations WHERE run_id IN (SELECT id FROM doomed)) AS reservations,
       (SELECT count(DISTINCT d.budget_id) FROM runs d
        WHERE d.id IN (SELECT id FROM doomed) AND d.budget_id IS NOT NULL
          AND EXISTS (SELECT 1 FROM budgets WHERE budgets.budget_id = d.budget_id)
          AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.budget_id = d.budget_id
                          AND o.id NOT IN (SELECT id FROM doomed))) AS budgets;

-- Push: who waits for a run (migration 0009's trigger notifies only those).

-- name: watch
-- Run on the listening connection after its LISTEN, before the reader's first look. Waiting for
-- the run row's share lock closes the race with a writer whose event statement found no watcher
-- yet: that writer holds the row until it commits, so the reader's look then sees its change;
-- a writer that comes after waits for this registration, and its trigger sees it.
-- The run id '' watches every run (a live list, 0020): no row to lock.
WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s FOR SHARE)
INSERT INTO watchers (run_id, pid) SELECT id, pg_backend_pid() FROM r
UNION ALL SELECT '', pg_backend_pid() WHERE %(run_id)s = '';

-- name: unwatch
DELETE FROM watchers WHERE run_id = %(run_id)s AND pid = pg_backend_pid();

-- name: forget_watchers
-- The rows of listening connections that are gone (killed, or their client died).
DELETE FROM watchers WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
RETURNING run_id;

-- name: redis_used
-- Record that this schema's queue used Redis under these data-loss markers (Queue.lost_data's
-- keys); whether it had before: one of them was recorded already, or none at all was and a run
-- exists (a schema from before markers were recorded, or whose runs were published before any
-- sweep). The SELECT sees the table as it was before the INSERT. False: a fresh Redis.
WITH k AS (SELECT 'redis_marker:' || m AS key FROM unnest(%(markers)s::text[]) AS m),
new AS (INSERT INTO outlast_meta (key, value) SELECT key, 'used' FROM k ON CONFLICT (key) DO NOTHING)
SELECT EXISTS (SELECT 1 FROM outlast_meta JOIN k USING (key))
    OR (NOT EXISTS (SELECT 1 FROM outlast_meta WHERE starts_with(key, 'redis_marker:'))
        AND EXISTS (SELECT 1 FROM runs)) AS used;

-- Schedules (migration 0010_time): declared by the workers that serve them, ticked by their sweepers.

-- name: declare_schedule
-- A worker's declaration at its first sweep; paused and last_tick are the schedule's own and stay.
INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up, last_tick)
VALUES (%(schedule)s, %(workflow)s, %(queue)s, %(cron)s, %(tz)s, %(input)s, %(catch_up)s,
        (SELECT at FROM outlast_now()))
ON CONFLICT (name) DO UPDATE SET workflow = EXCLUDED.workflow, queue = EXCLUDED.queue,
    cron = EXCLUDED.cron, tz = EXCLUDED.tz, input = EXCLUDED.input, catch_up = EXCLUDED.catch_up,
    updated_at = now()
WHERE (schedules.workflow, schedules.queue, schedules.cron, schedules.tz, schedules.input, schedules.catch_up)
      IS DISTINCT FROM (EXCLUDED.workflow, EXCLUDED.queue, EXCLUDED.cron, EXCLUDED.tz, EXCLUDED.input,
                        EXCLUDED.catch_up);

-- name: schedules
-- Every schedule (or those named), with the database clock the ticks are measured by.
SELECT *, (SELECT at FROM outlast_now()) AS db_now FROM schedules
WHERE %(names)s::text[] IS NULL OR name = ANY(%(names)s)
ORDER BY name;

-- name: advance_schedule
-- The ticks up to %(tick)s are enqueued (or skipped): only from the last tick this pass read, so
-- that of two workers ticking at once one moves it on. A paused schedule does not move.
UPDATE schedules SET last_tick = %(tick)s, updated_at = now()
WHERE name = %(schedule)s AND last_tick = %(was)s AND NOT paused
RETURNING name;

-- name: pause_schedule
-- Pause or resume; a resumed schedule goes on from now: the ticks of its pause are skipped.
UPDATE schedules SET paused = %(paused)s, updated_at = now(),
    last_tick = CASE WHEN paused AND NOT %(paused)s THEN greatest(last_tick, (SELECT at FROM outlast_now())) ELSE last_tick END
WHERE name = %(schedule)s
RETURNING *;

-- name: acquire_slot
-- One conditional statement takes a free slot of a capped key for the lease holder (its fencing
-- token current): the slot it already holds (a resumed run, a newer token), else one free or
-- expired slot picked at random. A slot another holder took meanwhile fails the insert's
-- condition: nothing is returned and the caller tries again later.
WITH r AS (
    SELECT id FROM runs WHERE id = %(run_id)s AND fencing_token = %(token)s
      AND state IN ('running', 'cancelling')),
mine AS (
    UPDATE slots SET token = %(token)s, expires_at = (SELECT at FROM outlast_now()) + make_interval(secs => %(ttl)s)
    FROM r WHERE slots.key = %(key)s AND slots.run_id = r.id AND slots.holder = %(holder)s
    RETURNING slots.slot),
free AS (
    SELECT n FROM r, generate_series(0, %(cap)s - 1) AS n
    WHERE NOT EXISTS (SELECT 1 FROM mine)
      AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.key = %(key)s AND s.slot = n AND s.expires_at >= (SELECT at FROM outlast_now()))
    ORDER BY random() LIMIT 1),
ins AS (
    INSERT INTO slots (key, slot, run_id, holder, token, expires_at)
    SELECT %(key)s, n, %(run_id)s, %(holder)s, %(token)s, (SELECT at FROM outlast_now()) + make_interval(secs => %(ttl)s) FROM free
    ON CONFLICT (key, slot) DO UPDATE SET run_id = excluded.run_id, holder = excluded.holder,
        token = excluded.token, expires_at = excluded.expires_at
    WHERE slots.expires_at < (SELECT at FROM outlast_now())
    RETURNING slot)
SELECT slot FROM mine UNION ALL SELECT slot FROM ins;

-- name: release_slots
-- The slots a run holds under its token: all of them, or one holder's (an operation's). For
-- each key freed, the run parked for it that was due first is due at once (SKIP LOCKED: never
-- waits).
WITH gone AS (
    DELETE FROM slots WHERE run_id = %(run_id)s AND token = %(token)s
      AND (%(holder)s::text IS NULL OR holder = %(holder)s)
    RETURNING key),
woken AS (
    UPDATE runs SET wake_at = (SELECT at FROM outlast_now()) FROM (
        SELECT w.id FROM (SELECT DISTINCT key FROM gone) g CROSS JOIN LATERAL (
            SELECT id FROM runs
            WHERE state = 'waiting' AND reason = 'concurrency_slot' AND slot_key = g.key
              AND wake_at > (SELECT at FROM outlast_now())
            ORDER BY wake_at LIMIT 1 FOR UPDATE SKIP LOCKED) w) first
    WHERE runs.id = first.id
    RETURNING runs.id)
SELECT key FROM gone;

-- name: park
-- Like `wait`, for a run that waits for a slot (naming its key) or for room in a rate window.
-- (The UNION's second half never sees the first's update: it reads the statement's snapshot.)
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = %(reason)s, slot_key = %(slot_key)s, owner = NULL,
        lease_expires_at = NULL, attempts = 0, wake_at = %(wake_at)s, published_at = (SELECT at FROM outlast_now()),
        updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL  -- run again after a lost acknowledgement: already parked under this token
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'waiting', %(reason)s);

-- Rolling deploys: which programs were served lately (migration 0012_deploy).

-- name: beat_programs
-- Every heartbeat: the programs this worker serves, on each of its queues (in key order: two
-- workers upserting the same rows never wait for each other in a cycle).
INSERT INTO served_programs (queue, workflow, program)
SELECT q, p.key, p.value
FROM unnest(%(queues)s::text[]) AS q, jsonb_each_text(%(programs)s) AS p
ORDER BY 1, 2, 3
ON CONFLICT (queue, workflow, program) DO UPDATE SET last_seen = now();

-- name: program_served
-- Whether the run could be claimed now by a worker serving its program (as the claim says), and a
-- live worker (a beat within three of its TTLs, as `workers` says) serves that program on the
-- run's queue, or one served it within the last %(within)s seconds. No row: not claimable.
SELECT EXISTS (
           SELECT 1 FROM workers
           WHERE outlast_live(last_beat, lease_ttl)
             AND r.queue = ANY (queues) AND programs ->> r.workflow = r.program)
       OR EXISTS (
           SELECT 1 FROM served_programs s
           WHERE s.queue = r.queue AND s.workflow = r.workflow AND s.program = r.program
             AND s.last_seen >= now() - make_interval(secs => %(within)s)) AS served
FROM runs r
WHERE r.id = %(id)s AND r.program IS NOT NULL
  AND ((r.state = 'queued' AND (r.start_at IS NULL OR r.start_at <= (SELECT at FROM outlast_now())))
       OR (r.state IN ('running', 'cancelling') AND r.lease_expires_at < (SELECT at FROM outlast_now()))
       OR (r.state = 'cancelling' AND r.lease_expires_at IS NULL)
       OR (r.state = 'waiting' AND (r.reason = 'program_changed' OR r.wake_at <= (SELECT at FROM outlast_now())))
       OR (r.state = 'awaiting_approval' AND r.wake_at <= (SELECT at FROM outlast_now())));

-- name: forget_served_programs
DELETE FROM served_programs WHERE last_seen < now() - make_interval(secs => %(after)s);

-- Child runs (`run.start`, `child.result()`).

-- name: insert_child
-- A child run, started by its parent's lease holder (fenced), never once the parent's cancellation
-- was requested: under the parent row's share lock, so a cancellation that then walks the
-- children finds it. It shares the parent's budget, deadline, tenant and priority. Its id is derived from
-- the parent's operation: started again after a crash, it finds itself (`created` false). Its
-- published_at is the epoch (never published): the sweeper's next pass hands it out; or NULL, held
-- for its tenant's turn (0014_fair), like a run enqueued.
WITH p AS (
    SELECT id, deadline, budget_id, tenant, priority, cancel_requested FROM runs
    WHERE id = %(run_id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
    FOR SHARE),
r AS (
    INSERT INTO runs (id, workflow, queue, input, input_hash, program, deadline, budget_id, tenant,
                      started_by, trace_context, published_at, priority)
    SELECT %(id)s, %(workflow)s, %(queue)s, %(input)s, %(input_hash)s, %(program)s, p.deadline,
           p.budget_id, p.tenant, p.id, %(trace_context)s,
           CASE WHEN p.tenant IS NULL OR %(window)s = 0 THEN 'epoch'::timestamptz
                -- its tenant's window is full, or older runs of the tenant wait: held (0014_fair)
                WHEN EXISTS (SELECT 1 FROM runs h WHERE h.state = 'queued' AND h.published_at IS NULL
                                 AND h.queue = %(queue)s AND h.tenant = p.tenant) THEN NULL
                WHEN (SELECT used FROM outlast_window(%(queue)s, p.tenant, %(window)s, NULL)) >= %(window)s THEN NULL
                ELSE 'epoch' END,
           p.priority
    FROM p WHERE NOT p.cancel_requested
    ON CONFLICT (id) DO NOTHING
    RETURNING id, workflow, queue, started_by, published_at),
e AS (
    INSERT INTO events (run_id, kind, detail)
    SELECT r.id, 'enqueued',
           jsonb_build_object('workflow', r.workflow, 'queue', r.queue, 'started_by', r.started_by)
    FROM r)
SELECT (SELECT count(*) FROM p) = 1 AS held,
       coalesce((SELECT cancel_requested FROM p), false) AS cancel_requested,
       (SELECT count(*) FROM r) = 1 AS created,
       coalesce((SELECT published_at IS NULL FROM r), false) AS held_back;

-- name: wait_child
-- The parent waits for its child with no worker held (like `wait`); the sweeper wakes it when the
-- child is final (`wake_child_waiters`). Run again after a lost acknowledgement, it finds the wait.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'child', waits_for = %(child)s, owner = NULL,
        lease_expires_at = NULL, attempts = 0, wake_at = NULL, published_at = (SELECT at FROM outlast_now()), updated_at = now()
    WHERE id = %(run_id)s AND fencing_token = %(token)s AND state IN ('running', 'cancelling')
    RETURNING id),
e AS (INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r)
SELECT id AS run_id FROM r
UNION ALL
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, 'waiting', 'child') WHERE waits_for = %(child)s;

-- name: wake_child_waiters
-- The sweeper: a run waiting for a child that is final is due now (the claim takes a waiting run
-- whose wake_at passed, and `due` publishes it). A separate statement from the child's own end,
-- so no race between a parent's wait and its child's end can leave the parent asleep. SKIP LOCKED:
-- every worker sweeps at once without waiting on another.
WITH w AS (
    SELECT p.id FROM runs p
    WHERE p.state = 'waiting' AND p.reason = 'child' AND p.wake_at IS NULL
      AND EXISTS (SELECT 1 FROM runs c WHERE c.id = p.waits_for
                  AND outlast_final(c.state))
    ORDER BY p.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE runs SET wake_at = (SELECT at FROM outlast_now()), updated_at = now() FROM w WHERE runs.id = w.id
RETURNING runs.id;

-- name: wake_parent
-- A child's end wakes its parent at once, if it waits for that child (`wake_child_waiters` covers
-- a parent whose wait commits after this, and a worker that dies before it gets here).
-- Not stamped as published: should the worker die before it publishes, the next sweep does.
UPDATE runs SET wake_at = (SELECT at FROM outlast_now()), updated_at = now()
WHERE id = %(id)s AND state = 'waiting' AND reason = 'child' AND waits_for = %(child)s
  AND wake_at IS NULL
RETURNING queue;

-- name: children
-- The unfinished runs these runs started (a cancellation walks them, level by level).
SELECT id FROM runs WHERE started_by = ANY(%(ids)s::text[])
  AND outlast_unfinished(state)
ORDER BY id;

-- name: children_of
-- The first %(most)s runs this run started (by age, runs_children), for its status: a fan-out of
-- thousands reads %(most)s rows.
SELECT id, workflow, state, reason FROM runs WHERE started_by = %(run_id)s ORDER BY created_at, id
LIMIT %(most)s;

-- name: children_tree
-- The runs this run started, and theirs, breadth first (the dashboard's tree): %(depth)s levels and
-- %(most)s runs at most, each run's own by age (runs_children). Postgres computes a recursive query
-- only as far as its rows are fetched: a fan-out of thousands reads %(most)s rows, in one statement.
WITH RECURSIVE tree AS (
    (SELECT id, workflow, state, reason, started_by, 1 AS depth FROM runs
     WHERE started_by = %(run_id)s ORDER BY created_at, id LIMIT %(most)s)
    UNION ALL
    SELECT c.id, c.workflow, c.state, c.reason, c.started_by, tree.depth + 1
    FROM tree CROSS JOIN LATERAL (
        SELECT id, workflow, state, reason, started_by FROM runs
        WHERE started_by = tree.id ORDER BY created_at, id LIMIT %(most)s) c
    WHERE tree.depth < %(depth)s)
SELECT id, workflow, state, reason, started_by AS parent, depth FROM tree LIMIT %(most)s;

-- ---------------------------------------------------------------------------------------------
-- The dashboard's sessions, sign-in attempts and signing key (0019; outlast/store/sessions.py)
-- ---------------------------------------------------------------------------------------------

-- name: session_create
INSERT INTO dashboard_sessions (id_hash, principal, token_hash, expires_at)
VALUES (%(id_hash)s, %(principal)s, %(token_hash)s, now() + make_interval(secs => %(seconds)s))
RETURNING created_at;

-- name: session_get
-- A live session's user, the token hash it was made with and when: never past its lifetime from
-- then, whatever its expires_at says.
SELECT principal, token_hash, created_at FROM dashboard_sessions
WHERE id_hash = %(id_hash)s AND expires_at > now()
  AND created_at > now() - make_interval(secs => %(seconds)s);

-- name: session_end
DELETE FROM dashboard_sessions WHERE id_hash = %(id_hash)s;

-- name: sessions_keep_only
-- After the users file changed: end every session whose user is gone or has a new token.
DELETE FROM dashboard_sessions s
WHERE NOT EXISTS (
    SELECT 1 FROM unnest(%(names)s::text[], %(hashes)s::text[]) AS u(name, hash)
    WHERE u.name = s.principal AND u.hash = s.token_hash)
RETURNING s.principal;

-- name: sessions_prune
DELETE FROM dashboard_sessions WHERE expires_at <= now();

-- name: sign_in_try
-- One more attempt from ``address``: the attempts in its current window, this one included.
INSERT INTO dashboard_sign_ins AS t (address, since, tries) VALUES (%(address)s, now(), 1)
ON CONFLICT (address) DO UPDATE SET
    since = CASE WHEN t.since <= now() - make_interval(secs => %(window)s) THEN now() ELSE t.since END,
    tries = CASE WHEN t.since <= now() - make_interval(secs => %(window)s) THEN 1 ELSE t.tries + 1 END
RETURNING tries;

-- name: sign_ins_prune
DELETE FROM dashboard_sign_ins WHERE since <= now() - make_interval(secs => %(window)s);

-- name: dashboard_key
-- The CSRF signing key: this one if none was made yet, else the one made first.
WITH made AS (
    INSERT INTO dashboard_keys (name, key) VALUES (%(key_name)s, %(key)s)
    ON CONFLICT (name) DO NOTHING RETURNING key)
SELECT key FROM made
UNION ALL
SELECT key FROM dashboard_keys WHERE name = %(key_name)s;

-- The runs list, a page at a time (0020; outlast/store/listing.py composes it): the filters given
-- (runs_where_*), joined by AND, in the order of the sort's index; the page after a cursor starts
-- past its key and id (runs_after_*). {key} is created_at, started_at or finished_at. The page's
-- ids are found first, from the filter's index alone (an index-only scan: the index holds the
-- filter, the key and the id), then their rows: else Postgres prefers walking runs_by_created
-- and throwing away the rows of other queues, several pages of rows for one.
-- name: runs_page
SELECT *, finished_at - coalesce(started_at, created_at) AS duration FROM runs
WHERE id IN (SELECT id FROM runs WHERE {where} ORDER BY {order} LIMIT %(limit)s)
ORDER BY {order}

-- A page searched by input or id prefix: read in one step (the GIN index, or the id's).
-- name: runs_page_direct
SELECT *, finished_at - coalesce(started_at, created_at) AS duration FROM runs
WHERE {where} ORDER BY {order} LIMIT %(limit)s

-- name: runs_order_time
{key} DESC, id DESC

-- name: runs_order_id
id COLLATE "C"

-- name: runs_after_time
({key}, id) < (%(after_at)s, %(after_id)s)

-- name: runs_after_id
id COLLATE "C" > %(after_id)s

-- name: runs_where_sorted
{key} IS NOT NULL

-- name: runs_where_since
{key} >= %(since)s

-- name: runs_where_until
{key} < %(until)s

-- name: runs_where_state
state = %(state)s

-- name: runs_where_workflow
workflow = %(workflow)s

-- name: runs_where_queue
queue = %(queue)s

-- name: runs_where_tenant
tenant = %(tenant)s

-- name: runs_where_priority
priority = %(priority)s

-- name: runs_where_parent
started_by = %(parent)s

-- name: runs_where_in_doubt
state = 'waiting' AND reason = 'in_doubt'

-- name: runs_where_input
input @> %(input)s

-- name: runs_where_id_prefix
id COLLATE "C" >= %(id_prefix)s AND id COLLATE "C" < %(id_next)s AND starts_with(id, %(id_prefix)s)

-- The dashboard's charts (0021): a rollup kept by the workers' sweepers, read by the charts.

-- name: rollup_flush
-- A worker's operation latencies of one minute added to each tool's row, in tool order (two
-- workers adding to the same rows lock them in one order), once per flush id: sent again after a
-- lost acknowledgement, the flush finds its id and adds nothing.
WITH once AS (INSERT INTO rollup_flushes (id) VALUES (%(id)s) ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO rollup_latency AS l (minute, tool, counts)
SELECT %(minute)s, t.tool, t.counts
FROM jsonb_to_recordset(%(tallies)s) AS t(tool text, counts bigint[])
WHERE EXISTS (SELECT 1 FROM once)
ORDER BY t.tool
ON CONFLICT (minute, tool) DO UPDATE SET counts = outlast_add_counts(l.counts, EXCLUDED.counts);

-- name: rollup_claim
-- This worker's turn to count the runs and sample the queues, unless another took one within
-- half a step (%(every)s seconds): one conditional update, one winner.
UPDATE rollup_turn SET at = now()
WHERE at <= now() - make_interval(secs => %(every)s / 2)
RETURNING at;

-- name: rollup_queue_names
-- The queues to sample: every queue a run is kept on (a skip scan of runs_by_queue, one index
-- probe per queue whatever the number of runs) and every queue a worker's record names.
WITH RECURSIVE q(queue) AS (
    (SELECT queue FROM runs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT r.queue FROM runs r WHERE r.queue > q.queue ORDER BY r.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL)
SELECT queue FROM q WHERE queue IS NOT NULL
UNION
SELECT unnest(queues) FROM workers
ORDER BY 1 LIMIT %(limit)s;

-- name: rollup
-- One step, one statement. The runs started, finished and failed in each minute from two minutes
-- before the last one counted (a run stamped just before a minute's end may commit after its
-- count: counted again, it is found), or at most a day back (the first step, or after an outage:
-- every minute since caught up at once), up to the last closed minute (with %(open)s, the
-- current one so far), each minute's row written whole (a step done twice writes the same rows);
-- the queues' samples at this minute; rows older than %(keep)s seconds deleted, flush ids older
-- than an hour. The counts read runs_by_started and runs_by_finished over those minutes only.
WITH span AS (
    SELECT greatest(coalesce((SELECT max(minute) FROM rollup_runs) - interval '2 minutes', '-infinity'),
                    date_trunc('minute', now()) - interval '1 day') AS since,
           date_trunc('minute', now()) + CASE WHEN %(open)s THEN interval '1 minute' ELSE interval '0' END AS until),
started AS (
    SELECT date_trunc('minute', started_at) AS minute, count(*) AS n FROM runs
    WHERE started_at >= (SELECT since FROM span) AND started_at < (SELECT until FROM span) GROUP BY 1),
finished AS (
    SELECT date_trunc('minute', finished_at) AS minute, count(*) AS n,
           count(*) FILTER (WHERE state = 'failed') AS failed
    FROM runs
    WHERE finished_at >= (SELECT since FROM span) AND finished_at < (SELECT until FROM span) GROUP BY 1),
counted AS (
    INSERT INTO rollup_runs AS r (minute, started, finished, failed)
    SELECT m.minute, coalesce(s.n, 0), coalesce(f.n, 0), coalesce(f.failed, 0)
    FROM span
    CROSS JOIN LATERAL generate_series(span.since, span.until - interval '1 minute', interval '1 minute') AS m(minute)
    LEFT JOIN started s ON s.minute = m.minute
    LEFT JOIN finished f ON f.minute = m.minute
    ORDER BY m.minute
    ON CONFLICT (minute) DO UPDATE
    SET started = EXCLUDED.started, finished = EXCLUDED.finished, failed = EXCLUDED.failed
    RETURNING minute),
sampled AS (
    INSERT INTO rollup_queues AS r (minute, queue, depth, oldest_age)
    SELECT date_trunc('minute', now()), s.queue, s.depth, s.age
    FROM unnest(%(queues)s::text[], %(depths)s::bigint[], %(ages)s::float8[]) AS s(queue, depth, age)
    ORDER BY s.queue
    ON CONFLICT (minute, queue) DO UPDATE SET depth = EXCLUDED.depth, oldest_age = EXCLUDED.oldest_age
    RETURNING 1),
old AS (SELECT date_trunc('minute', now()) - make_interval(secs => %(keep)s) AS before),
gone_runs AS (DELETE FROM rollup_runs WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_queues AS (DELETE FROM rollup_queues WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_latency AS (DELETE FROM rollup_latency WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_flushes AS (DELETE FROM rollup_flushes WHERE at < now() - interval '1 hour' RETURNING 1)
SELECT (SELECT count(*) FROM counted) AS minutes, (SELECT min(minute) FROM counted) AS since,
       (SELECT max(minute) FROM counted) AS until, (SELECT count(*) FROM sampled) AS queues,
       (SELECT count(*) FROM gone_runs) + (SELECT count(*) FROM gone_queues)
       + (SELECT count(*) FROM gone_latency) AS deleted;

-- name: chart_runs
-- The charts' reads: a window's rows, through each table's primary key (minute first).
SELECT minute, started, finished, failed FROM rollup_runs
WHERE minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
ORDER BY minute;

-- name: chart_queues
SELECT minute, queue, depth, oldest_age FROM rollup_queues
WHERE minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
ORDER BY queue, minute;

-- name: chart_latency
-- Each tool's bucket counts summed over the last %(recent)s seconds and over the last %(seconds)s:
-- at most a day of minutes x tools rows read.
SELECT l.tool, u.i, sum(u.c) FILTER (WHERE l.minute >= date_trunc('minute', now()) - make_interval(secs => %(recent)s)) AS recent,
       sum(u.c) AS whole
FROM rollup_latency l, unnest(l.counts) WITH ORDINALITY AS u(c, i)
WHERE l.minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
GROUP BY l.tool, u.i
ORDER BY l.tool, u.i;
