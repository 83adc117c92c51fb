-- The pauses family (pauses.py): an operator's pause of one run, of every run of a workflow, or of a
-- queue: a row of `pauses` (0035), keyed by its scope (run, workflow or queue) and target, with
-- who paused it, why and when. A run is held by the pauses of its own id, its workflow and its
-- queue: `outlast_pauses_of` (0035) says which, for the claim and the renewal (leases.sql),
-- park_paused, pause_of and let_go. A pause reads as the JSON {scope, target, by, why, at}.

-- name: pause
-- The pause recorded (again: the latest reason and principal replace the earlier ones).
INSERT INTO pauses AS p (scope, target, by, why, at)
VALUES (%(scope)s, %(target)s, %(by)s, %(why)s, now())
ON CONFLICT (scope, target) DO UPDATE SET by = EXCLUDED.by, why = EXCLUDED.why, at = EXCLUDED.at
RETURNING to_jsonb(p) AS pause;

-- name: unpause
-- The pause lifted; the runs it parked are queued again by let_go, a statement after this one's
-- commit (a run parking meanwhile holds the pause's row FOR SHARE: this delete waits for it).
DELETE FROM pauses p WHERE scope = %(scope)s AND target = %(target)s
RETURNING to_jsonb(p) AS pause;

-- name: pauses
-- Every pause in force, oldest first.
SELECT to_jsonb(p) AS pause FROM pauses p ORDER BY at, scope, target;

-- name: pause_of
-- The pauses that hold a run (its own, its workflow's, its queue's).
SELECT to_jsonb(p) AS pause FROM runs r, outlast_pauses_of(r.id, r.workflow, r.queue) p
WHERE r.id = %(id)s
ORDER BY p.scope;

-- name: park_paused
-- A held run stops at a crossing because it is paused: it waits, reason `paused`, its lease given
-- up (fenced), holding no worker, while a pause holds it; if every pause was lifted meanwhile, it
-- is queued again (its caller publishes it). The pause rows are read FOR SHARE (from the table, a
-- function's rows cannot be locked): an unpause's delete waits for this commit, and its let_go then
-- finds the run waiting. Run again after a lost
-- acknowledgement, it finds the run in the state it left it in under its token.
WITH p AS (
    SELECT to_jsonb(p) AS pause FROM pauses p
    WHERE (p.scope, p.target) IN (SELECT h.scope, h.target FROM runs r, outlast_pauses_of(r.id, r.workflow, r.queue) h
                                  WHERE r.id = %(id)s)
    ORDER BY p.scope
    FOR SHARE OF p),
r AS (
    UPDATE runs SET state = CASE WHEN EXISTS (SELECT 1 FROM p) THEN 'waiting' ELSE 'queued' END,
        reason = CASE WHEN EXISTS (SELECT 1 FROM p) THEN 'paused' END,
        owner = NULL, lease_expires_at = NULL, attempts = 0, wake_at = NULL,
        published_at = {{now}}, updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id, state)
SELECT id AS run_id, state
FROM r, outlast_event(id, CASE WHEN state = 'waiting' THEN 'paused' ELSE 'unpaused' END,
     CASE WHEN state = 'waiting'
          THEN jsonb_build_object('reason', 'paused', 'message', %(message)s::text,
                                  'pauses', (SELECT jsonb_agg(pause) FROM p))
          ELSE jsonb_build_object('why', 'the pause was lifted before the run stopped') END)
UNION ALL
SELECT id, state FROM outlast_redone(%(id)s, %(token)s, 'waiting', 'paused')
UNION ALL
SELECT id, state FROM outlast_redone(%(id)s, %(token)s, 'queued', NULL);

-- name: let_go
-- After an unpause: the runs of its scope parked `paused` that no pause holds any more are queued
-- again (their ids come back to be published), locked in id order as every write does.
WITH m AS (
    SELECT id FROM runs
    WHERE state = 'waiting' AND reason = 'paused'
      AND CASE %(scope)s::text WHEN 'run' THEN id WHEN 'workflow' THEN workflow ELSE queue END = %(target)s::text
      AND NOT EXISTS (SELECT 1 FROM outlast_pauses_of(runs.id, runs.workflow, runs.queue) p)
    ORDER BY id COLLATE "C"
    FOR NO KEY UPDATE),
r AS (
    UPDATE runs SET state = 'queued', reason = NULL, attempts = 0,
        published_at = {{now}}, updated_at = now()
    FROM m WHERE runs.id = m.id
    RETURNING runs.id, runs.queue, runs.priority)
SELECT id, queue, priority FROM r, outlast_event(id, 'unpaused', %(detail)s);
