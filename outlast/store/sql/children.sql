-- The children family (children.py; `run.start`, `child.result()`): a child run started by its
-- parent's lease holder (fenced), the parent's wait for it and its waking, and the children read (a
-- cancellation's walk, a status, the dashboard's tree).

-- name: insert_child
-- A child run, started by its parent's lease holder (fenced), never once the parent's cancellation
-- was requested: under the parent row's share lock, so a cancellation that then walks the
-- children finds it. It shares the parent's budget, deadline, tenant and priority. Its id is derived from
-- the parent's operation: started again after a crash, it finds itself (`created` false). Its
-- published_at is the epoch (never published): the sweeper's next pass hands it out; or NULL, held
-- for its tenant's turn (0014_fair), like a run enqueued.
WITH p AS (
    SELECT id, deadline, budget_id, tenant, priority, cancel_requested FROM runs
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
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
    RETURNING id, workflow, queue, started_by, published_at)
SELECT (SELECT count(*) FROM p) = 1 AS held,
       coalesce((SELECT cancel_requested FROM p), false) AS cancel_requested,
       (SELECT count(*) FROM r, outlast_event(r.id, 'enqueued', jsonb_build_object(
           'workflow', r.workflow, 'queue', r.queue, 'started_by', r.started_by))) = 1 AS created,
       coalesce((SELECT published_at IS NULL FROM r), false) AS held_back;

-- name: wait_child
-- The parent waits for its child with no worker held (like `wait`); the sweeper wakes it when the
-- child is final (`wake_child_waiters`). Run again after a lost acknowledgement, it finds the wait.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'child', waits_for = %(child)s, owner = NULL,
        lease_expires_at = NULL, attempts = 0, wake_at = NULL, published_at = {{now}}, updated_at = now()
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
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
UPDATE runs SET wake_at = {{now}}, updated_at = now() FROM w WHERE runs.id = w.id
RETURNING runs.id;

-- name: wake_parent
-- A child's end wakes its parent at once, if it waits for that child (`wake_child_waiters` covers
-- a parent whose wait commits after this, and a worker that dies before it gets here).
-- Not stamped as published: should the worker die before it publishes, the next sweep does.
UPDATE runs SET wake_at = {{now}}, updated_at = now()
WHERE id = %(id)s AND waits_for = %(child)s
  AND ((state = 'waiting' AND reason = 'child' AND wake_at IS NULL)
       -- the first of several waits, one of them this child (a timer among them may be due later)
       OR (state IN ('waiting', 'awaiting_approval') AND reason = 'first'
           AND (wake_at IS NULL OR wake_at > {{now}})))
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
