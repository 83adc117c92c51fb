-- The leases family (leases.py): the claim that takes a run's lease (a new fencing token), its
-- renewal, and every change of a held run's state by its lease holder (finish, wait, release), each
-- fenced by `outlast_held_by(fencing_token, state, %(token)s)` (0023) and finding its own effect
-- when run again after a lost acknowledgement (outlast_redone); a worker's refusal of a run whose
-- program it does not serve, and an operator's resume of a waiting run.

-- name: claim
-- One conditional UPDATE takes the lease: a queued run, one whose lease expired, one that
-- waits for a worker serving its program, or one whose deadline passed, of a workflow the claimer
-- knows (%(programs)s: {workflow: program} of its app). The database clock sets
-- the expiry. A tenant's run taken makes room in its tenant's window (0014_fair): the tenant's
-- next held run is published in the same statement (turn_id; the claimer adds its stream entry,
-- else the sweeper does).
-- An expired lease is not taken from an owner that may still renew it after an outage: Postgres
-- has answered the claimer for only %(steady)s seconds since an outage it saw (NULL: it saw none),
-- and the owner has not beaten since (its record, `beat_worker`: after its renewals), nor has it
-- been silent for three of its TTLs since then (`outlast_live`, the outage not counted). Its
-- first renewal after the outage decides; a worker dead for good loses its runs three TTLs on.
WITH c AS (
    UPDATE runs SET
        state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'running' END,
        reason = NULL,
        fencing_token = fencing_token + 1,
        owner = %(worker)s,
        lease_expires_at = {{now}} + make_interval(secs => %(ttl)s),
        attempts = attempts + 1,
        started_at = coalesce(started_at, now()),  -- first taken: set once (0020, the runs list)
        program = coalesce(program, %(programs)s::jsonb ->> workflow),
        published_at = coalesce(published_at, {{now}}),  -- a held run's stray entry: no longer held
        updated_at = now()
    WHERE id = %(id)s AND (%(queue)s::text IS NULL OR queue = %(queue)s)
      -- a workflow the claimer's app does not know is never taken: handed back, never failed
      AND %(programs)s::jsonb ->> workflow IS NOT NULL
      AND (program IS NULL OR program = %(programs)s::jsonb ->> workflow)
      AND ((state = 'queued' AND (start_at IS NULL OR start_at <= {{now}}))
           OR (outlast_leased(state) AND lease_expires_at < {{now}}
               AND NOT EXISTS (
                   SELECT 1 FROM workers w, LATERAL (SELECT now() - make_interval(secs => %(steady)s::float8) AS at) back
                   WHERE w.name = runs.owner AND w.last_beat < back.at AND outlast_live(back.at, w.lease_ttl)))
           OR (state = 'cancelling' AND lease_expires_at IS NULL)
           OR (state = 'waiting' AND (reason = 'program_changed' OR wake_at <= {{now}}))
           OR (state = 'awaiting_approval' AND wake_at <= {{now}})
           -- its deadline passed while nothing ran: ended by the executor (its partial handler)
           OR (state IN ('queued', 'waiting', 'awaiting_approval') AND deadline <= {{now}}))
    RETURNING *, {{now}} AS db_now),
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
    UPDATE runs SET published_at = {{now}} FROM turn
    WHERE runs.id = turn.id AND runs.published_at IS NULL
    RETURNING runs.id, runs.priority)
SELECT c.*, released.id AS turn_id, released.priority AS turn_priority,
       -- an operator's pauses that hold the run (pauses.sql): it stops before its workflow runs
       (SELECT jsonb_agg(to_jsonb(p) ORDER BY p.scope) FROM outlast_pauses_of(c.id, c.workflow, c.queue) p) AS paused
FROM c LEFT JOIN released ON true;

-- name: renew
-- One statement renews every lease a worker holds, locking the runs in id order (as every write
-- does). Each held run comes back: renewed; lost (a newer token exists: another worker took it);
-- or neither (it ended, final or waiting, under this very token: not a lost lease).
WITH held AS (
    SELECT * FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS h(id, token)),
mine AS (
    SELECT runs.id FROM runs JOIN held ON runs.id = held.id
    WHERE outlast_held_by(runs.fencing_token, runs.state, held.token)
    ORDER BY runs.id COLLATE "C"  -- the writer's order (code points), whatever the database's
    FOR NO KEY UPDATE OF runs),
renewed AS (
    UPDATE runs SET lease_expires_at = {{now}} + make_interval(secs => %(ttl)s)
    FROM mine WHERE runs.id = mine.id
    RETURNING runs.id, runs.cancel_requested, runs.workflow, runs.queue),
slots_renewed AS (
    -- the concurrency slots held under these leases live as long as they do (0011_flow)
    UPDATE slots SET expires_at = {{now}} + make_interval(secs => %(ttl)s)
    FROM renewed, held
    WHERE slots.run_id = renewed.id AND held.id = renewed.id AND slots.token = held.token)
SELECT held.id, renewed.id IS NOT NULL AS renewed,
       coalesce(renewed.cancel_requested, false) AS cancel_requested,
       runs.fencing_token IS DISTINCT FROM held.token AS lost,
       -- paused by an operator (pauses.sql): the run stops at its next crossing
       EXISTS (SELECT 1 FROM outlast_pauses_of(renewed.id, renewed.workflow, renewed.queue) p) AS paused
FROM held LEFT JOIN renewed ON renewed.id = held.id LEFT JOIN runs ON runs.id = held.id;

-- name: finish
-- Run again after a lost acknowledgement, it finds the run already in that state under its token.
-- Only on the journal the worker chained (%(journal_len)s entries): the results it held are
-- written in the same shared commit, just before; if they were not, nor is the final state.
WITH r AS (
    UPDATE runs SET state = %(state)s, reason = %(reason)s, result = %(result)s, error = %(error)s,
        owner = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND journal_len = %(journal_len)s
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, %(state)s, %(detail)s)
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, %(state)s, %(reason)s);

-- name: wait
-- A durable wait: the lease is given up and the run no longer counts as crashing its worker.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = %(reason)s, owner = NULL, lease_expires_at = NULL,
        attempts = 0, wake_at = %(wake_at)s, published_at = {{now}}, updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
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
        published_at = {{now}}, updated_at = now()
    WHERE id = %(id)s AND program IS DISTINCT FROM %(program)s
      AND ((state = 'queued' AND (start_at IS NULL OR start_at <= {{now}}))
           OR (state = 'running' AND lease_expires_at < {{now}})
           OR (state = 'waiting' AND wake_at <= {{now}}))
      AND NOT EXISTS (
          SELECT 1 FROM workers
          WHERE outlast_live(last_beat, lease_ttl)
            AND runs.queue = ANY (queues) AND programs ->> runs.workflow = runs.program)
      AND NOT EXISTS (
          SELECT 1 FROM served_programs s
          WHERE s.queue = runs.queue AND s.workflow = runs.workflow AND s.program = runs.program
            AND s.last_seen >= now() - make_interval(secs => %(within)s))
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s);

-- name: release
-- Graceful hand-over: the lease ends now and the claim does not count as a crash. Only a lease
-- held (a held run has an expiry): a run handed over already under this token, `cancelling`, is
-- not handed over twice. Run again after a lost acknowledgement, it finds the run handed over
-- under its token (queued, or cancelling with no lease).
WITH r AS (
    UPDATE runs SET state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'queued' END,
        owner = NULL, lease_expires_at = NULL,
        attempts = greatest(attempts - 1, 0), published_at = {{now}}, updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND lease_expires_at IS NOT NULL
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'handed_over', %(detail)s)
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'queued', NULL)
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'cancelling', NULL) WHERE lease_expires_at IS NULL;

-- name: requeue
-- An operator's resume of a waiting run; with accept_program the run adopts the serving program.
-- The wait resumed is the one the operator saw: %(token)s, the run's token then (a claim since
-- makes a new one). Run again after a lost acknowledgement, it finds the run queued under it.
WITH r AS (
    UPDATE runs SET state = 'queued', reason = NULL, attempts = 0, published_at = {{now}},
        updated_at = now(),
        program = CASE WHEN %(accept_program)s THEN NULL ELSE program END
    WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'waiting'
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'resumed', %(detail)s)
UNION ALL
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'queued', NULL);
