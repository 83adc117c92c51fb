-- The sweeper's family (sweeps.py): the clock it stamps by, the runs due again that no stream
-- entry may deliver, tenants' turns (0014_fair), deadlines passed while nothing ran, and retention's
-- prune (`outlast prune` and OUTLAST_RETENTION).

-- name: unseen
-- The sweeper, before `due`: the clock its pass stamps by, and whether a queued run went unseen
-- for %(after)s seconds by it: only such a run may be one whose entry still waits in its stream,
-- which Redis is asked about (`Queue.waiting`), so it is asked only when there is one.
SELECT {{now}} AS now, EXISTS (
    SELECT 1 FROM runs WHERE state = 'queued'
      AND published_at < {{now}} - make_interval(secs => %(after)s)) AS queued;

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
           {{now}} - make_interval(secs => u.since) AS since,
           {{now}} - make_interval(secs => u.last) AS last
    FROM unnest(%(queues)s::text[], %(priorities)s::text[], %(since)s::float8[], %(last)s::float8[])
         AS u(queue, priority, since, last)),
near AS (SELECT unnest(%(waiting)s::text[]) AS id),
due AS (
    SELECT id FROM runs
    WHERE outlast_unfinished(state)
      -- one pass of the sweeper never sees again what it stamped itself
      AND published_at < coalesce(%(cutoff)s::timestamptz, 'infinity')
      AND ((published_at < {{now}} - make_interval(secs => %(after)s)
            AND ((state = 'queued' AND %(queued)s AND runs.id NOT IN (SELECT near.id FROM near) AND NOT EXISTS (
                     SELECT 1 FROM span
                     WHERE span.queue = runs.queue AND span.priority = runs.priority
                       AND runs.published_at > span.since AND runs.published_at < span.last))
                 OR (outlast_leased(state) AND lease_expires_at < {{now}})
                 OR (state = 'cancelling' AND lease_expires_at IS NULL)
                 OR (state = 'waiting' AND reason = 'program_changed')))
           -- a delayed run came due (its published_at is its start until this stamps it)
           OR (state = 'queued' AND start_at <= {{now}} AND published_at <= start_at)
           -- a timer or an approval's expiry came due: wake it at once, then again while unseen
           OR (state IN ('waiting', 'awaiting_approval') AND wake_at <= {{now}}
               AND published_at < greatest(wake_at, {{now}} - make_interval(secs => %(after)s))))
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE runs SET published_at = {{now}} FROM due WHERE runs.id = due.id
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
UPDATE runs SET published_at = {{now}} FROM turn WHERE runs.id = turn.id AND runs.published_at IS NULL
RETURNING runs.id, runs.queue, runs.priority;

-- name: expire_deadlines
-- A deadline that passed while nothing ran: the run is stamped published, to be published at once
-- (queue, priority), so that a worker claims it and ends it through the executor (its partial
-- handler runs); one still not ended %(grace)s seconds past its deadline (no worker serves its
-- workflow, or its entry was lost) is ended here, timed_out (queue NULL). Not a queued run that
-- was published (not held by its tenant's window): its entry is on its way, in a backlog perhaps,
-- and a second entry would only add to the queue's depth (a lost one is re-published by `due`).
WITH late AS (
    SELECT id, deadline < {{now}} - make_interval(secs => %(grace)s) AS overdue FROM runs
    WHERE deadline < {{now}}
      AND (state IN ('queued', 'waiting', 'awaiting_approval')
           OR (outlast_leased(state) AND lease_expires_at < {{now}})
           OR (state = 'cancelling' AND lease_expires_at IS NULL))
      AND ((published_at IS NULL OR (published_at < deadline AND state <> 'queued'))
           OR deadline < {{now}} - make_interval(secs => %(grace)s))
    LIMIT %(limit)s FOR UPDATE SKIP LOCKED),
ended AS (
    UPDATE runs SET state = 'timed_out', reason = 'deadline passed', owner = NULL,
        lease_expires_at = NULL, finished_at = now(), updated_at = now()
    FROM late WHERE runs.id = late.id AND late.overdue
    RETURNING runs.id),
published AS (
    UPDATE runs SET published_at = {{now}}
    FROM late WHERE runs.id = late.id AND NOT late.overdue
    RETURNING runs.id, runs.queue, runs.priority)
SELECT id AS run_id, NULL::text AS queue, NULL::text AS priority
FROM ended, outlast_event(id, 'timed_out', '{"reason": "deadline passed"}')
UNION ALL
SELECT id, queue, priority FROM published;

-- name: orphans
-- Runs still leased to a worker that went silent (a beat overdue by half a lease, and silent for
-- less than a lease: every lease it held has expired after that), each with the seconds left on
-- its lease: taken over once it expires. Only while such a worker exists are runs read (its
-- leased ones, by state: runs_by_state).
SELECT r.id, r.owner, extract(epoch FROM r.lease_expires_at - {{now}})::float8 AS seconds
FROM workers w JOIN runs r ON r.owner = w.name AND outlast_leased(r.state)
WHERE w.last_beat < now() - make_interval(secs => w.lease_ttl / 2)
  AND w.last_beat > now() - make_interval(secs => w.lease_ttl)
  AND r.lease_expires_at > {{now}}
ORDER BY r.lease_expires_at
LIMIT %(limit)s;

-- name: db_now
-- The clock of claims, leases and due times (0018_clock), and the database's own (audit stamps).
SELECT {{now}} AS now, now() AS wall;

-- name: prune
-- One batch of finished runs deleted with everything that is theirs, in one statement (one
-- transaction), and (without %(state)s) the generations that runs carried forward ended before
-- the cutoff. A run that another run continues stays until that one is gone (batches go from
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
m AS (DELETE FROM messages WHERE run_id IN (SELECT id FROM doomed)),
v AS (DELETE FROM reservations WHERE run_id IN (SELECT id FROM doomed) RETURNING 1),
s AS (DELETE FROM settlements WHERE run_id IN (SELECT id FROM doomed)),
st AS (DELETE FROM run_state WHERE run_id IN (SELECT id FROM doomed)),
-- its artifacts, but those saved with keep=True (0034): deleted by `outlast artifacts RUN --delete`
ar AS (DELETE FROM artifacts WHERE run_id IN (SELECT id FROM doomed) AND NOT keep RETURNING 1),
-- the ended generations of a run carried forward: with their run, or once ended before the cutoff
gp AS (
    DELETE FROM generations WHERE run_id IN (SELECT id FROM doomed)
       OR (%(state)s::text IS NULL AND carried_at < %(before)s)
    RETURNING run_id, generation),
jp AS (
    DELETE FROM journal_past p USING gp WHERE p.run_id = gp.run_id AND p.generation = gp.generation
    RETURNING 1),
r AS (DELETE FROM runs WHERE id IN (SELECT id FROM doomed) RETURNING id, budget_id),
b AS (
    DELETE FROM budgets WHERE budget_id IN (SELECT budget_id FROM r)
      AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.budget_id = budgets.budget_id
                      AND o.id NOT IN (SELECT id FROM r))
    RETURNING budget_id)
SELECT (SELECT count(*) FROM r) AS runs, (SELECT count(*) FROM j) + (SELECT count(*) FROM jp) AS journal,
       (SELECT count(*) FROM e) AS events, (SELECT count(*) FROM a) AS approvals,
       (SELECT count(*) FROM v) AS reservations, (SELECT count(DISTINCT budget_id) FROM b) AS budgets,
       (SELECT count(*) FROM ar) AS artifacts;

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
       (SELECT count(*) FROM journal WHERE run_id IN (SELECT id FROM doomed))
       + (SELECT count(*) FROM journal_past p JOIN generations g
            ON p.run_id = g.run_id AND p.generation = g.generation
          WHERE g.run_id IN (SELECT id FROM doomed)
             OR (%(state)s::text IS NULL AND g.carried_at < %(before)s)) AS journal,
       (SELECT count(*) FROM events WHERE run_id IN (SELECT id FROM doomed)) AS events,
       (SELECT count(*) FROM approvals WHERE run_id IN (SELECT id FROM doomed)) AS approvals,
       (SELECT count(*) FROM reservations WHERE run_id IN (SELECT id FROM doomed)) AS reservations,
       (SELECT count(DISTINCT d.budget_id) FROM runs d
        WHERE d.id IN (SELECT id FROM doomed) AND d.budget_id IS NOT NULL
          AND EXISTS (SELECT 1 FROM budgets WHERE budgets.budget_id = d.budget_id)
          AND NOT EXISTS (SELECT 1 FROM runs o WHERE o.budget_id = d.budget_id
                          AND o.id NOT IN (SELECT id FROM doomed))) AS budgets,
       (SELECT count(*) FROM artifacts WHERE run_id IN (SELECT id FROM doomed) AND NOT keep) AS artifacts;

-- name: movable
-- Runs parked by a program change or by a bug (waiting, program_changed or workflow_error) of a
-- workflow a worker serves, on another program than the one it serves: the worker resumes them on
-- its program, and replay takes each forward only where it agrees with the journal crossing for
-- crossing (a run that diverges waits again, resume_impossible, and is not moved again).
SELECT r.id, r.fencing_token, r.workflow, r.program, r.reason, r.queue, r.priority
FROM runs r JOIN unnest(%(workflows)s::text[], %(programs)s::text[]) AS s(workflow, program)
  ON r.workflow = s.workflow
WHERE r.state = 'waiting' AND r.reason IN ('program_changed', 'workflow_error')
  AND r.program IS DISTINCT FROM s.program
ORDER BY r.updated_at
LIMIT %(limit)s;

-- name: parked_of
-- The runs of one workflow parked by a program change, a bug or a replay that diverged: what an
-- operator's bulk resume moves.
SELECT id, fencing_token, reason, queue, priority
FROM runs
WHERE workflow = %(workflow)s AND state = 'waiting'
  AND reason IN ('program_changed', 'workflow_error', 'resume_impossible')
ORDER BY updated_at
LIMIT %(limit)s;
