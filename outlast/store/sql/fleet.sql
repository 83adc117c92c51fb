-- The fleet family (fleet.py): the workers' heartbeat records, the programs they serve (rolling
-- deploys, 0012_deploy), watchers whose connection is gone, and the Redis data-loss markers.

-- name: beat_worker
-- One statement per heartbeat: the worker's record, made at its first beat, all of it taken
-- from the beat (a worker restarted under a fixed name: a new pid, and started again).
-- With it, the schema version its code knows (0022: a contract waits for older workers to go).
WITH w AS (
    INSERT INTO workers (name, host, pid, queues, programs, concurrency, lease_ttl, runs_held,
                         tool_threads, tool_threads_busy)
    VALUES (%(worker)s, %(host)s, %(pid)s, %(queues)s, %(programs)s, %(concurrency)s, %(lease_ttl)s,
            %(runs_held)s, %(tool_threads)s, %(tool_threads_busy)s)
    ON CONFLICT (name) DO UPDATE SET
        host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues, programs = EXCLUDED.programs,
        concurrency = EXCLUDED.concurrency, lease_ttl = EXCLUDED.lease_ttl, runs_held = EXCLUDED.runs_held,
        tool_threads = EXCLUDED.tool_threads, tool_threads_busy = EXCLUDED.tool_threads_busy,
        started_at = CASE WHEN (workers.host, workers.pid) = (EXCLUDED.host, EXCLUDED.pid)
                          THEN workers.started_at ELSE now() END,
        last_beat = now()
    RETURNING name)
INSERT INTO worker_code (name, code_version) SELECT name, %(code_version)s FROM w
ON CONFLICT (name) DO UPDATE SET code_version = EXCLUDED.code_version;

-- name: writable
-- Whether a transaction here may write (outlast health): not on a standby not yet promoted, nor
-- with default_transaction_read_only on; either refuses every write of a worker.
SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off' AS writable;

-- name: forget_worker
DELETE FROM workers WHERE name = %(worker)s;

-- name: forget_gone_workers
-- Records of workers silent for longer than %(after)s seconds (never fewer than ten TTLs).
DELETE FROM workers
WHERE last_beat < now() - make_interval(secs => greatest(%(after)s, 10 * lease_ttl))
RETURNING name;

-- name: workers
-- With the schema version each worker's code knows (none: code older than 0022).
SELECT w.*, c.code_version, outlast_live(w.last_beat, w.lease_ttl) AS live,
       extract(epoch FROM now() - w.last_beat) AS beat_age
FROM workers w LEFT JOIN worker_code c USING (name) ORDER BY w.host, w.started_at, w.name;

-- name: forget_watchers
-- The rows of listening connections that are gone (killed, or their client died).
DELETE FROM watchers WHERE pid NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
RETURNING run_id;

-- name: redis_used
-- Record that this schema's queue used Redis under these data-loss markers (Queue.lost_data's
-- keys); whether it had before: one of them was recorded already, or none at all was and a run
-- exists (a schema from before markers were recorded, or whose runs were published before any
-- sweep). The SELECT sees the table as it was before the INSERT. False: a fresh Redis.
WITH k AS (SELECT 'redis_marker:' || m AS key FROM unnest(%(markers)s::text[]) AS m),
new AS (INSERT INTO outlast_meta (key, value) SELECT key, 'used' FROM k ON CONFLICT (key) DO NOTHING)
SELECT EXISTS (SELECT 1 FROM outlast_meta JOIN k USING (key))
    OR (NOT EXISTS (SELECT 1 FROM outlast_meta WHERE starts_with(key, 'redis_marker:'))
        AND EXISTS (SELECT 1 FROM runs)) AS used;

-- name: beat_programs
-- Every heartbeat: the programs this worker serves, on each of its queues (in key order: two
-- workers upserting the same rows never wait for each other in a cycle).
INSERT INTO served_programs (queue, workflow, program)
SELECT q, p.key, p.value
FROM unnest(%(queues)s::text[]) AS q, jsonb_each_text(%(programs)s) AS p
ORDER BY 1, 2, 3
ON CONFLICT (queue, workflow, program) DO UPDATE SET last_seen = now();

-- name: program_served
-- Whether the run could be claimed now by a worker serving its program (as the claim says), and a
-- live worker (a beat within three of its TTLs, as `workers` says) serves that program on the
-- run's queue, or one served it within the last %(within)s seconds. A run not yet taken (no
-- program) is served by any program of its workflow. No row: not claimable.
SELECT EXISTS (
           SELECT 1 FROM workers
           WHERE outlast_live(last_beat, lease_ttl)
             AND r.queue = ANY (queues) AND programs ->> r.workflow = coalesce(r.program, programs ->> r.workflow))
       OR EXISTS (
           SELECT 1 FROM served_programs s
           WHERE s.queue = r.queue AND s.workflow = r.workflow AND s.program = coalesce(r.program, s.program)
             AND s.last_seen >= now() - make_interval(secs => %(within)s)) AS served
FROM runs r
WHERE r.id = %(id)s
  AND ((r.state = 'queued' AND (r.start_at IS NULL OR r.start_at <= {{now}}))
       OR (outlast_leased(r.state) AND r.lease_expires_at < {{now}})
       OR (r.state = 'cancelling' AND r.lease_expires_at IS NULL)
       OR (r.state = 'waiting' AND (r.reason = 'program_changed' OR r.wake_at <= {{now}}))
       OR (r.state = 'awaiting_approval' AND r.wake_at <= {{now}}));

-- name: unknown_workflows
-- At a worker's start: workflows of unfinished runs on its queues that its app does not know.
SELECT DISTINCT workflow FROM runs
WHERE queue = ANY (%(queues)s::text[]) AND outlast_unfinished(state) AND %(programs)s::jsonb ->> workflow IS NULL
LIMIT 10;

-- name: forget_served_programs
DELETE FROM served_programs WHERE last_seen < now() - make_interval(secs => %(after)s);

-- name: declare_channels
-- At a worker's start: the channels each of its workflows declares, per program (0028), as
-- {channel: JSON schema}, or NULL for a workflow that declares none. Published again by a later
-- start, it is the newest (`outlast_declared`). %(declared)s: [{workflow, program, channels}].
-- With them, the limits `outlast_send` applies, from this worker's settings (0029).
WITH limits AS (
    UPDATE send_limits SET max_payload = %(max_payload)s, max_inbox = %(max_inbox)s,
        max_inbox_run = %(max_inbox_run)s, published_at = now())
INSERT INTO workflow_channels (workflow, program, channels)
SELECT d ->> 'workflow', d ->> 'program', nullif(d -> 'channels', 'null')
FROM jsonb_array_elements(%(declared)s) AS d
ORDER BY 1, 2
ON CONFLICT (workflow, program) DO UPDATE SET channels = EXCLUDED.channels, published_at = now();
