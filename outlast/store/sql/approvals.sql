-- The approvals family (approvals.py): a request for a person's decision, made visible together
-- with its run's wait (fenced), the requests read, and a decision that wakes its run.

-- name: await_approval
-- The request becomes visible together with the run's wait: a decision can only find a run
-- that is really waiting for it. On a replay the existing request (and its expiry) stands.
WITH r AS (
    UPDATE runs SET state = 'awaiting_approval', reason = 'approval', owner = NULL,
        lease_expires_at = NULL, attempts = 0, published_at = {{now}}, updated_at = now(),
        wake_at = coalesce(
            (SELECT expires_at FROM approvals WHERE run_id = %(run_id)s AND op_id = %(op_id)s),
            {{now}} + make_interval(secs => %(expires_in)s))
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id),
a AS (
    INSERT INTO approvals (id, run_id, op_id, action, args, args_hash, policy_version, approvers, expires_at,
                           authenticated)
    SELECT %(id)s, r.id, %(op_id)s, %(action)s, %(args)s, %(args_hash)s, %(policy_version)s,
           %(approvers)s, {{now}} + make_interval(secs => %(expires_in)s), %(authenticated)s
    FROM r
    ON CONFLICT (run_id, op_id) DO NOTHING)
SELECT id AS run_id FROM r, outlast_event(id, 'awaiting_approval', %(detail)s)
UNION ALL  -- run again after a lost acknowledgement: already waiting under this token
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, 'awaiting_approval', 'approval');

-- name: get_approval
SELECT *, (expires_at IS NOT NULL AND expires_at <= {{now}}) AS expired FROM approvals
WHERE run_id = %(run_id)s AND op_id = %(op_id)s;

-- name: approvals
SELECT *, (expires_at IS NOT NULL AND expires_at <= {{now}}) AS expired FROM approvals
WHERE run_id = %(run_id)s ORDER BY created_at;

-- name: decide
-- The decision is committed, and the run woken, in one statement; only a pending, unexpired
-- request takes a decision.
WITH a AS (
    UPDATE approvals SET status = %(status)s, decided_by = %(by)s, comment = %(comment)s,
        new_args = %(new_args)s, decided_at = now(), decided_by_detail = %(who)s
    WHERE run_id = %(run_id)s AND op_id = %(op_id)s AND status = 'pending'
      AND (expires_at IS NULL OR expires_at > {{now}})
      AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s AND state = 'awaiting_approval')
    RETURNING run_id),
r AS (
    UPDATE runs SET state = CASE WHEN cancel_requested THEN 'cancelling' ELSE 'queued' END,
        reason = NULL, published_at = {{now}}, updated_at = now()
    WHERE id IN (SELECT run_id FROM a) AND state = 'awaiting_approval'
    RETURNING id, queue)
SELECT a.run_id, r.queue FROM a CROSS JOIN outlast_event(a.run_id, 'decision', %(detail)s) LEFT JOIN r ON true
UNION ALL  -- run again after a lost acknowledgement: this very decision taken, its run to publish
SELECT d.run_id, w.queue FROM approvals d
LEFT JOIN runs w ON w.id = d.run_id AND w.state IN ('queued', 'cancelling')  -- not taken yet
WHERE d.run_id = %(run_id)s AND d.op_id = %(op_id)s AND d.status = %(status)s
  AND d.decided_by = %(by)s AND d.comment = %(comment)s AND d.new_args IS NOT DISTINCT FROM %(new_args)s
  AND d.decided_by_detail = %(who)s;

-- name: pending_approvals
-- Every request still waiting for a decision, oldest first, with the seconds left before expiry.
SELECT a.*, (a.expires_at IS NOT NULL AND a.expires_at <= {{now}}) AS expired,
       extract(epoch FROM a.expires_at - {{now}}) AS seconds_left, r.workflow, r.queue
FROM approvals a JOIN runs r ON r.id = a.run_id
WHERE a.status = 'pending' AND r.state = 'awaiting_approval'
ORDER BY a.created_at LIMIT %(limit)s;

-- name: publish_approval
-- An approval request of a `run.first` made visible before the run's wait (`wait_first`), fenced,
-- once (a replay finds it, and its expiry stands). Its expiry comes back.
WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)),
a AS (
    INSERT INTO approvals (id, run_id, op_id, action, args, args_hash, policy_version, approvers, expires_at,
                           authenticated)
    SELECT %(id)s, r.id, %(op_id)s, %(action)s, %(args)s, %(args_hash)s, %(policy_version)s,
           %(approvers)s, {{now}} + make_interval(secs => %(expires_in)s), %(authenticated)s
    FROM r
    ON CONFLICT (run_id, op_id) DO NOTHING
    RETURNING expires_at)
SELECT expires_at FROM a
UNION ALL
SELECT expires_at FROM approvals WHERE run_id = %(run_id)s AND op_id = %(op_id)s AND EXISTS (SELECT 1 FROM r);

-- name: withdraw_approvals
-- The approval requests that lost a `run.first`, still pending, expire now (a decision is then
-- refused), by the lease holder.
UPDATE approvals SET expires_at = {{now}}
WHERE run_id = %(run_id)s AND op_id = ANY(%(ops)s::text[]) AND status = 'pending'
  AND EXISTS (SELECT 1 FROM runs WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s))
RETURNING op_id;
