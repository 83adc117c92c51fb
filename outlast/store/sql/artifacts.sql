-- The artifacts family (artifacts.py): files a run saved, one row each by (run, operation, name)
-- (0035_artifacts); their bytes are the payload store's (payloads.sql), by SHA-256.

-- name: artifact_put
-- Indexed once its bytes are stored. Saved again by the same operation (a replayed crossing, a
-- tool dispatched again) with the same bytes: the same row, untouched; with other bytes: the row
-- now names them.
INSERT INTO artifacts (run_id, op_id, name, sha256, size, media_type, keep, created_at)
VALUES (%(run_id)s, %(op_id)s, %(artifact)s, %(sha256)s, %(size)s, %(media_type)s, %(keep)s,
        {{now}})
ON CONFLICT (run_id, op_id, name) DO UPDATE SET sha256 = EXCLUDED.sha256, size = EXCLUDED.size,
    media_type = EXCLUDED.media_type, keep = EXCLUDED.keep, created_at = EXCLUDED.created_at
WHERE artifacts.sha256 <> EXCLUDED.sha256
RETURNING run_id;

-- name: artifacts_of
-- A run's artifacts, oldest first.
SELECT op_id, name, sha256, size, media_type, keep, created_at FROM artifacts
WHERE run_id = %(run_id)s ORDER BY created_at, op_id, name;

-- name: artifact_drop
-- An artifact deleted (a kept one, past its run): its bytes are then the payload sweeper's.
DELETE FROM artifacts WHERE run_id = %(run_id)s AND name = %(artifact)s
  AND (%(op_id)s::text IS NULL OR op_id = %(op_id)s)
RETURNING op_id;
