-- The shown family (shown.py): what a run shows while it runs, read from outside. Its state rows
-- and custom events are written by the journal entries that record them (0025_run_state's trigger),
-- never by a statement of their own.

-- name: run_state
-- A run's state, every key or one (%(key)s NULL: every key), by key.
SELECT key, value, version, seq, updated_at FROM run_state
WHERE run_id = %(run_id)s AND (%(key)s::text IS NULL OR key = %(key)s)
ORDER BY key;
