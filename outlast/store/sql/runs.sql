-- The runs family (runs.py): a run's row and its events, its enqueue (with its budget) and its
-- cancellation, dead letters requeued, and the counts of runs the metrics and the dashboard read.

-- name: insert_run
-- The run, its budget and its 'enqueued' event in one statement (one commit): a run never exists
-- without the limits it was given. A delayed run starts at %(start_at)s or %(start_in)s seconds
-- from now (the database clock); its deadline counts from its start.
WITH s AS (SELECT coalesce(%(start_at)s::timestamptz, {{now}} + make_interval(secs => %(start_in)s)) AS start_at),
r AS (
    INSERT INTO runs (id, workflow, queue, input, input_hash, program, deadline, parent_id, budget_id,
                      trace_context, start_at, published_at, priority, tenant)
    SELECT %(id)s, %(workflow)s, %(queue)s, %(input)s, %(input_hash)s, %(program)s,
           coalesce(%(deadline_at)s, greatest({{now}}, s.start_at) + make_interval(secs => %(deadline_in)s)),
           %(parent_id)s, %(budget_id)s, %(trace_context)s, s.start_at,
           CASE WHEN s.start_at > {{now}} THEN s.start_at  -- see 0010_time: the sweeper publishes it then
                WHEN %(tenant)s::text IS NULL OR %(window)s = 0 THEN {{now}}
                -- its tenant's window is full, or older runs of the tenant wait: held (0014_fair)
                WHEN EXISTS (SELECT 1 FROM runs h WHERE h.state = 'queued' AND h.published_at IS NULL
                                 AND h.queue = %(queue)s AND h.tenant = %(tenant)s) THEN NULL
                WHEN (SELECT used FROM outlast_window(%(queue)s, %(tenant)s, %(window)s, NULL)) >= %(window)s THEN NULL
                ELSE {{now}} END,
           %(priority)s, %(tenant)s
    FROM s
    ON CONFLICT (id) DO NOTHING
    RETURNING *),
b AS (
    INSERT INTO budgets (budget_id, name, limit_value)
    SELECT r.budget_id, l.name, l.amount
    FROM r, unnest(%(budget_names)s::text[], %(budget_limits)s::numeric[]) AS l(name, amount)
    WHERE r.budget_id = r.id)
SELECT r.* FROM r, outlast_event(r.id, 'enqueued', jsonb_build_object('workflow', r.workflow, 'queue', r.queue));

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
was AS (SELECT id FROM events WHERE run_id = %(run_id)s AND write_id = %(write_id)s)
SELECT e.id FROM r, outlast_event(r.id, %(kind)s, %(detail)s, %(write_id)s) AS e(id)
WHERE NOT EXISTS (SELECT 1 FROM was)
UNION ALL
SELECT id FROM was;

-- name: events
SELECT id, run_id, at, kind, detail FROM events WHERE run_id = %(run_id)s AND id > %(after)s ORDER BY id;

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
            WHEN state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible', 'workflow_error')
                THEN 'cancelled'
            WHEN state IN ('queued', 'waiting', 'awaiting_approval') THEN 'cancelling'
            ELSE state END,
        reason = CASE
            WHEN state = 'queued' AND journal_len = 0 THEN 'cancelled before it started'
            WHEN state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible', 'workflow_error')
                THEN 'cancelled while it could not be resumed (' || reason || '): no compensation ran'
            ELSE reason END,
        finished_at = CASE WHEN (state = 'queued' AND journal_len = 0) OR
                                (state = 'waiting' AND reason IN ('program_changed', 'journal_altered', 'resume_impossible', 'workflow_error'))
                           THEN now() ELSE finished_at END,
        published_at = {{now}}
    WHERE id = %(id)s
      AND NOT outlast_final(state)
      AND NOT EXISTS (SELECT 1 FROM was)
    RETURNING id, state, queue)
SELECT id, state, queue FROM r, outlast_event(id, 'cancel_requested', %(detail)s, %(write_id)s)
UNION ALL
SELECT id, state, queue FROM runs WHERE id = %(id)s AND EXISTS (SELECT 1 FROM was);

-- name: run_gauges
-- For the metrics gauges, every few seconds: the runs waiting on an unresolved in-doubt operation;
-- the longest a running run has gone without progress (updated_at: its claim or its last journal
-- entry, never a lease renewal). Both read through runs_by_state.
SELECT (SELECT count(*) FROM runs WHERE state = 'waiting' AND reason = 'in_doubt') AS in_doubt,
       coalesce(extract(epoch FROM now() - (
           SELECT min(updated_at) FROM runs WHERE outlast_leased(state))), 0) AS stalled;

-- name: parked
-- Parked runs per workflow and reason, for the metrics gauges and the fleet view: waiting until a
-- person acts (a bug: workflow_error; a program no live worker serves: program_changed; a replay
-- that diverged: resume_impossible; an operator's pause: paused). Read through runs_by_state.
SELECT workflow, reason, count(*) AS n FROM runs
WHERE state = 'waiting' AND reason IN ('workflow_error', 'program_changed', 'resume_impossible', 'paused')
GROUP BY workflow, reason
ORDER BY workflow, reason;

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
    UPDATE runs SET published_at = {{now}}
    WHERE id = %(id)s
      AND outlast_unfinished(state)
      AND NOT EXISTS (SELECT 1 FROM was)
    RETURNING id, queue, state, priority)
SELECT queue, state, priority FROM r, outlast_event(id, 'requeued', %(detail)s, %(write_id)s)
UNION ALL
SELECT queue, state, priority FROM runs
WHERE id = %(id)s AND outlast_unfinished(state) AND EXISTS (SELECT 1 FROM was);

-- name: count_by_state
-- Runs counted by state, each only up to %(most)s + 1 (a count past %(most)s is shown as more):
-- at most that many entries of runs_by_state read per state, whatever the table's size. Every
-- runs page, /api/runs call and live refresh counts: a count of every run read the whole table
-- (60 ms at 500k runs). Oldest first (the index read backward): their pages are the likeliest to
-- be all visible, so the count reads the index alone.
SELECT s AS state,
       (SELECT count(*) FROM (SELECT FROM runs WHERE state = s ORDER BY created_at, id LIMIT %(most)s + 1) AS f) AS n
FROM unnest(%(states)s::text[]) AS s;

-- name: change_mark
-- The events' sequence: it moves whenever anything happens to any run (read, never advanced).
SELECT last_value, is_called FROM events_id_seq;
