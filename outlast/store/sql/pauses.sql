-- The pauses family (pauses.py): an operator's pause of one run, of every run of a workflow, or of a
-- queue. A pause is a row of outlast_meta keyed `pause:SCOPE:TARGET` (scope run, workflow or queue)
-- whose value is the JSON {scope, target, by, why, at}. A run is held by any of the three keys of
-- its own id, workflow and queue: the claim and the renewal (leases.sql), park_paused, pause_of and
-- let_go look them up, each by that same three-key condition (schema-free: no migration; a
-- function of a later migration may say it once).

-- name: pause
-- The pause recorded (again: the latest reason and principal replace the earlier ones).
INSERT INTO outlast_meta (key, value)
VALUES ('pause:' || %(scope)s::text || ':' || %(target)s::text, (%(value)s::jsonb || jsonb_build_object('at', now()))::text)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
RETURNING value::jsonb AS pause;

-- name: unpause
-- The pause lifted; the runs it parked are queued again by let_go, a statement after this one's
-- commit (a run parking meanwhile holds the pause's row FOR SHARE: this delete waits for it).
DELETE FROM outlast_meta WHERE key = 'pause:' || %(scope)s::text || ':' || %(target)s::text
RETURNING value::jsonb AS pause;

-- name: pauses
-- Every pause in force, oldest first.
SELECT value::jsonb AS pause FROM outlast_meta WHERE starts_with(key, 'pause:')
ORDER BY value::jsonb ->> 'at', key;

-- name: pause_of
-- The pauses that hold a run (its own, its workflow's, its queue's).
SELECT m.value::jsonb AS pause FROM runs r, outlast_meta m
WHERE r.id = %(id)s AND m.key IN ('pause:run:' || r.id, 'pause:workflow:' || r.workflow, 'pause:queue:' || r.queue)
ORDER BY m.key;

-- name: park_paused
-- A held run stops at a crossing because it is paused: it waits, reason `paused`, its lease given
-- up (fenced), holding no worker, while a pause holds it; if every pause was lifted meanwhile, it
-- is queued again (its caller publishes it). The pause rows are read FOR SHARE: an unpause's delete
-- waits for this commit, and its let_go then finds the run waiting. Run again after a lost
-- acknowledgement, it finds the run in the state it left it in under its token.
WITH p AS (
    SELECT m.value::jsonb AS pause FROM runs r, outlast_meta m
    WHERE r.id = %(id)s AND m.key IN ('pause:run:' || r.id, 'pause:workflow:' || r.workflow, 'pause:queue:' || r.queue)
    ORDER BY m.key
    FOR SHARE OF m),
r AS (
    UPDATE runs SET state = CASE WHEN EXISTS (SELECT 1 FROM p) THEN 'waiting' ELSE 'queued' END,
        reason = CASE WHEN EXISTS (SELECT 1 FROM p) THEN 'paused' END,
        owner = NULL, lease_expires_at = NULL, attempts = 0, wake_at = NULL,
        published_at = (SELECT at FROM outlast_now()), updated_at = now()
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
      AND NOT EXISTS (SELECT 1 FROM outlast_meta
                      WHERE key IN ('pause:run:' || runs.id, 'pause:workflow:' || runs.workflow, 'pause:queue:' || runs.queue))
    ORDER BY id COLLATE "C"
    FOR NO KEY UPDATE),
r AS (
    UPDATE runs SET state = 'queued', reason = NULL, attempts = 0,
        published_at = (SELECT at FROM outlast_now()), updated_at = now()
    FROM m WHERE runs.id = m.id
    RETURNING runs.id, runs.queue, runs.priority)
SELECT id, queue, priority FROM r, outlast_event(id, 'unpaused', %(detail)s);
