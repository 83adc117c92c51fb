-- The requests family (requests.py): a typed request a run publishes, made visible together with
-- its run's wait (fenced), the requests read, and the first valid answer, which wakes its run.

-- name: await_request
-- The request becomes visible together with the run's wait (reason 'request', woken at its
-- expiry): an answer can only find a run that is really waiting. On a replay the existing
-- request (and its expiry) stands.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'request', owner = NULL, lease_expires_at = NULL,
        attempts = 0, published_at = {{now}}, updated_at = now(),
        wake_at = coalesce(
            (SELECT expires_at FROM requests WHERE run_id = %(run_id)s AND op_id = %(op_id)s),
            {{now}} + make_interval(secs => %(expires_in)s))
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id),
q AS (
    INSERT INTO requests (run_id, op_id, name, payload, response_schema, responders, expires_at)
    SELECT r.id, %(op_id)s, %(req_name)s, %(payload)s, %(response_schema)s, %(responders)s,
           {{now}} + make_interval(secs => %(expires_in)s)
    FROM r
    ON CONFLICT (run_id, op_id) DO NOTHING)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
UNION ALL  -- run again after a lost acknowledgement: already waiting under this token
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, 'waiting', 'request');

-- name: get_request
-- One request of a run, with whether it expired by the database clock.
SELECT *, (expires_at IS NOT NULL AND expires_at <= {{now}}) AS expired FROM requests
WHERE run_id = %(run_id)s AND op_id = %(op_id)s;

-- name: run_requests
-- Every request of a run, oldest first, with whether it expired and the seconds left.
SELECT *, (expires_at IS NOT NULL AND expires_at <= {{now}}) AS expired,
       extract(epoch FROM expires_at - {{now}}) AS seconds_left
FROM requests WHERE run_id = %(run_id)s ORDER BY created_at, op_id;

-- name: answer_request
-- The first valid answer is committed, and the run woken, in one statement; only a pending,
-- unexpired request of a run waiting on a request (or on the first of several waits) takes one. Run again after a lost
-- acknowledgement, it finds this very answer, and its run still to publish.
WITH q AS (
    UPDATE requests SET status = 'answered', answer = %(answer)s, answered_by = %(by)s,
        answered_by_detail = %(who)s, answered_at = now()
    WHERE run_id = %(run_id)s AND op_id = %(op_id)s AND status = 'pending'
      AND (expires_at IS NULL OR expires_at > {{now}})
      AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s AND state IN ('waiting', 'awaiting_approval')
                  AND reason IN ('request', 'first'))
    RETURNING run_id),
r AS (  -- a run waiting on this request, or on the first of several waits (it looks which won)
    UPDATE runs SET state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'queued' END,
        reason = NULL, published_at = {{now}}, updated_at = now()
    WHERE id IN (SELECT run_id FROM q) AND state IN ('waiting', 'awaiting_approval')
      AND reason IN ('request', 'first')
    RETURNING id, queue)
SELECT q.run_id, r.queue FROM q CROSS JOIN outlast_event(q.run_id, 'answered', %(detail)s) LEFT JOIN r ON true
UNION ALL
SELECT d.run_id, w.queue FROM requests d
LEFT JOIN runs w ON w.id = d.run_id AND w.state IN ('queued', 'cancelling')  -- not taken yet
WHERE d.run_id = %(run_id)s AND d.op_id = %(op_id)s AND d.status = 'answered'
  AND d.answer = %(answer)s AND d.answered_by = %(by)s AND d.answered_by_detail = %(who)s;

-- name: publish_request
-- A request of a `run.first` made visible before the run's wait (`wait_first`), fenced: only by
-- the lease holder, once (a replay finds it, and its expiry stands). Its expiry comes back.
WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)),
q AS (
    INSERT INTO requests (run_id, op_id, name, payload, response_schema, responders, expires_at)
    SELECT r.id, %(op_id)s, %(req_name)s, %(payload)s, %(response_schema)s, %(responders)s,
           {{now}} + make_interval(secs => %(expires_in)s)
    FROM r
    ON CONFLICT (run_id, op_id) DO NOTHING
    RETURNING expires_at)
SELECT expires_at FROM q
UNION ALL
SELECT expires_at FROM requests WHERE run_id = %(run_id)s AND op_id = %(op_id)s AND EXISTS (SELECT 1 FROM r);

-- name: withdraw_requests
-- The requests that lost a `run.first`, still pending, are withdrawn (an answer is then refused),
-- by the lease holder.
UPDATE requests SET status = 'withdrawn'
WHERE run_id = %(run_id)s AND op_id = ANY(%(ops)s::text[]) AND status = 'pending'
  AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s))
RETURNING op_id;
