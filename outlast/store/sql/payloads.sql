-- The payloads family (payloads.py): values a journal entry holds by reference, one row each per
-- run (0033_payloads). The bytes are the row's `body`, or an object store's (`body` NULL).

-- name: payload_put
-- Stored before the entry that refers to it is journaled. Stored again (a resume storing what its
-- crashed worker stored) it is the same row, made young again, unless a sweep has marked it: then
-- no row comes back, and the caller waits for the sweep to finish.
INSERT INTO payloads (run_id, sha256, size, media_type, body, created_at)
VALUES (%(run_id)s, %(sha256)s, %(size)s, %(media_type)s, %(body)s, {{now}})
ON CONFLICT (run_id, sha256) DO UPDATE SET created_at = EXCLUDED.created_at,
    body = coalesce(payloads.body, EXCLUDED.body)
WHERE NOT payloads.swept
RETURNING sha256, body IS NULL AS external;

-- name: payloads_get
-- A run's values by SHA-256, in one round trip (a resume's referenced results).
SELECT sha256, body FROM payloads
WHERE run_id = %(run_id)s AND sha256 = ANY(%(shas)s::text[]) AND NOT swept;

-- name: payload_slice
-- A slice of one value's bytes (a column's value held by reference, read a slice at a time: the
-- reader and its Postgres client never hold the whole value twice). `body` NULL: its bytes are in
-- the object store.
SELECT substring(body FROM %(start)s FOR %(length)s) AS body, body IS NULL AS external FROM payloads
WHERE run_id = %(run_id)s AND sha256 = %(sha256)s AND NOT swept;

-- name: payload_bytes
-- The bytes a run holds in the payload store.
SELECT outlast_payload_bytes(%(run_id)s) AS bytes;

-- name: payloads_sweep
-- One batch of rows past the grace not yet known to be journaled, or whose run is gone: those a
-- journal entry of the run, its input (as enqueued, carried forward or of an ended generation), its
-- result, a request's answer or a message of it (taken or not), or an
-- artifact (0034, kept past its run or not) refers to are marked journaled, the others swept
-- (orphans, and the payloads of runs pruned).
WITH old AS (
    SELECT p.run_id, p.sha256,
        EXISTS (SELECT 1 FROM artifacts a WHERE a.run_id = p.run_id AND a.sha256 = p.sha256)
        OR EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id)
        AND (EXISTS (SELECT 1 FROM journal j WHERE j.run_id = p.run_id
                       AND left(j.body, 9) = '{"$refs":' AND strpos(j.body, p.sha256) > 0)
             OR EXISTS (SELECT 1 FROM journal_past j WHERE j.run_id = p.run_id
                       AND left(j.body, 9) = '{"$refs":' AND strpos(j.body, p.sha256) > 0)
             OR EXISTS (SELECT 1 FROM messages m WHERE m.run_id = p.run_id
                       AND m.payload -> '$refs' -> 'payload' ->> 'sha256' = p.sha256)
             OR EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id
                       AND (r.input -> '$refs' -> 'input' ->> 'sha256' = p.sha256
                            OR r.carried -> '$refs' -> 'input' ->> 'sha256' = p.sha256
                            OR r.result -> '$refs' -> 'result' ->> 'sha256' = p.sha256))
             OR EXISTS (SELECT 1 FROM requests q WHERE q.run_id = p.run_id
                       AND q.answer -> '$refs' -> 'answer' ->> 'sha256' = p.sha256)
             OR EXISTS (SELECT 1 FROM generations g WHERE g.run_id = p.run_id
                       AND g.input -> '$refs' -> 'input' ->> 'sha256' = p.sha256)) AS kept
    FROM payloads p
    WHERE NOT p.swept
      AND p.created_at < {{now}} - make_interval(secs => %(grace)s)
      AND (NOT p.journaled OR NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = p.run_id)
           AND NOT EXISTS (SELECT 1 FROM artifacts a WHERE a.run_id = p.run_id AND a.sha256 = p.sha256))
    ORDER BY p.created_at
    LIMIT %(limit)s
    FOR UPDATE OF p SKIP LOCKED)
UPDATE payloads p SET journaled = old.kept, swept = NOT old.kept
FROM old WHERE p.run_id = old.run_id AND p.sha256 = old.sha256
RETURNING p.swept;

-- name: payloads_swept
-- The rows marked swept (this pass's, and any a sweeper died before deleting).
SELECT run_id, sha256, body IS NULL AS external FROM payloads WHERE swept LIMIT %(limit)s;

-- name: payloads_drop
-- Swept rows deleted, once their objects are.
DELETE FROM payloads p USING unnest(%(run_ids)s::text[], %(shas)s::text[]) AS d(run_id, sha256)
WHERE p.run_id = d.run_id AND p.sha256 = d.sha256 AND p.swept;
