-- Push (notify.py): who waits for a run; migration 0009's trigger notifies only those.

-- name: watch
-- Run on the listening connection after its LISTEN, before the reader's first look. Waiting for
-- the run row's share lock closes the race with a writer whose event statement found no watcher
-- yet: that writer holds the row until it commits, so the reader's look then sees its change;
-- a writer that comes after waits for this registration, and its trigger sees it.
-- The run id '' watches every run (a live list, 0020): no row to lock.
WITH r AS (SELECT id FROM runs WHERE id = %(run_id)s FOR SHARE)
INSERT INTO watchers (run_id, pid) SELECT id, pg_backend_pid() FROM r
UNION ALL SELECT '', pg_backend_pid() WHERE %(run_id)s = '';

-- name: unwatch
DELETE FROM watchers WHERE run_id = %(run_id)s AND pid = pg_backend_pid();
