-- The size family (size.py): what a run keeps stored, and its one size warning. The worker counts
-- the bytes it journals as it writes them (`journal_bytes`, added by the append itself); the
-- parts below are read only when someone asks (`outlast status`, the run page).

-- name: run_bytes
-- What a run keeps stored, by part, in bytes: its journal (every entry, captures included), the
-- entries of its earlier generations kept (`journal_past`), the messages sent to it, its state and
-- its events. A journal body is counted as the text it is (octet_length: what the worker counts
-- when it writes it); a jsonb value as Postgres keeps it (pg_column_size, after compression).
-- Neither reads a value out of TOAST: each part is one index range of its table. The payload
-- store's values are counted by their recorded size (0033: in Postgres or an object store).
SELECT 'journal' AS part, coalesce(sum(octet_length(body)), 0)::bigint AS bytes
FROM journal WHERE run_id = %(run_id)s
UNION ALL
SELECT 'earlier generations', coalesce(sum(octet_length(body)), 0)::bigint
FROM journal_past WHERE run_id = %(run_id)s
UNION ALL
SELECT 'messages', coalesce(sum(pg_column_size(payload)), 0)::bigint FROM messages WHERE run_id = %(run_id)s
UNION ALL
SELECT 'state', coalesce(sum(pg_column_size(value)), 0)::bigint FROM run_state WHERE run_id = %(run_id)s
UNION ALL
SELECT 'events', coalesce(sum(pg_column_size(detail)), 0)::bigint FROM events WHERE run_id = %(run_id)s
UNION ALL
SELECT 'payloads', outlast_payload_bytes(%(run_id)s);

-- name: size_warning
-- The run's journal passed OUTLAST_RUN_SIZE_WARN: it is marked, and its one 'size_warning' event
-- written, by the first statement that finds it unmarked; another (a resumed run's new worker, a
-- stale one) finds it marked and writes nothing. A final run is left as it is.
WITH r AS (
    UPDATE runs SET size_warned_at = now()
    WHERE id = %(run_id)s AND size_warned_at IS NULL AND NOT outlast_final(state)
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'size_warning', %(detail)s);
