-- The first family (first.py): a run waiting on the first of several waits (`run.first`): its
-- fenced wait, and the sweeper's wake-up of such a run whose child is final.

-- name: wait_first
-- The run waits on the first of several waits (reason 'first'): `awaiting_approval` when an
-- approval is among them (a decision finds it so), else `waiting`; woken at the earliest due time
-- (a timer, an expiry), by an answer, a decision, the end of the child it `waits_for`, or a message
-- on one of the channels it receives on (`waits_channels`). With receives among the waits, it is
-- committed only if the run's count of accepted messages is still `seen` (as `await_message`: a
-- send that raced it came first, and the worker looks again, or finds it waiting and wakes it).
-- Run again after a lost acknowledgement, it finds the wait.
WITH r AS (
    UPDATE runs SET state = %(state)s, reason = 'first', waits_for = %(child)s, owner = NULL,
        waits_channels = %(channels)s,
        lease_expires_at = NULL, attempts = 0, wake_at = %(wake_at)s,
        published_at = {{now}}, updated_at = now()
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND (%(seen)s::bigint IS NULL OR messages_sent = %(seen)s::bigint)
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, %(state)s, %(detail)s)
UNION ALL
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, %(state)s, 'first');

-- name: wake_first_waiters
-- The sweeper: a run waiting on the first of several waits, one of them a child that is final, is
-- due now (as `wake_child_waiters` does for reason 'child': a child's end that came before the
-- wait committed woke nothing). SKIP LOCKED, one index probe per waiting run (runs_waiting_first).
WITH w AS (
    SELECT p.id FROM runs p
    WHERE p.reason = 'first' AND p.waits_for IS NOT NULL AND p.state IN ('waiting', 'awaiting_approval')
      AND (p.wake_at IS NULL OR p.wake_at > {{now}})
      AND EXISTS (SELECT 1 FROM runs c WHERE c.id = p.waits_for AND outlast_final(c.state))
    ORDER BY p.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE runs SET wake_at = {{now}}, updated_at = now() FROM w WHERE runs.id = w.id
RETURNING runs.id;
