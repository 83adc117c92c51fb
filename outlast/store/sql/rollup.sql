-- The dashboard's charts (rollup.py, 0021): a rollup kept once a minute by the workers'
-- sweepers, and the charts' reads of it.

-- name: rollup_flush
-- A worker's operation latencies of one minute added to each tool's row, in tool order (two
-- workers adding to the same rows lock them in one order), once per flush id: sent again after a
-- lost acknowledgement, the flush finds its id and adds nothing.
WITH once AS (INSERT INTO rollup_flushes (id) VALUES (%(id)s) ON CONFLICT DO NOTHING RETURNING id)
INSERT INTO rollup_latency AS l (minute, tool, counts)
SELECT %(minute)s, t.tool, t.counts
FROM jsonb_to_recordset(%(tallies)s) AS t(tool text, counts bigint[])
WHERE EXISTS (SELECT 1 FROM once)
ORDER BY t.tool
ON CONFLICT (minute, tool) DO UPDATE SET counts = outlast_add_counts(l.counts, EXCLUDED.counts);

-- name: rollup_claim
-- This worker's turn to count the runs and sample the queues, unless another took one within
-- half a step (%(every)s seconds): one conditional update, one winner.
UPDATE rollup_turn SET at = now()
WHERE at <= now() - make_interval(secs => %(every)s / 2)
RETURNING at;

-- name: rollup_queue_names
-- The queues to sample: every queue a run is kept on (a skip scan of runs_by_queue, one index
-- probe per queue whatever the number of runs) and every queue a worker's record names.
WITH RECURSIVE q(queue) AS (
    (SELECT queue FROM runs ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT r.queue FROM runs r WHERE r.queue > q.queue ORDER BY r.queue LIMIT 1)
    FROM q WHERE q.queue IS NOT NULL)
SELECT queue FROM q WHERE queue IS NOT NULL
UNION
SELECT unnest(queues) FROM workers
ORDER BY 1 LIMIT %(limit)s;

-- name: rollup
-- One step, one statement. The runs started, finished and failed in each minute from two minutes
-- before the last one counted (a run stamped just before a minute's end may commit after its
-- count: counted again, it is found), or at most a day back (the first step, or after an outage:
-- every minute since caught up at once), up to the last closed minute (with %(open)s, the
-- current one so far), each minute's row written whole (a step done twice writes the same rows);
-- the queues' samples at this minute; rows older than %(keep)s seconds deleted, flush ids older
-- than an hour. The counts read runs_by_started and runs_by_finished over those minutes only.
WITH span AS (
    SELECT greatest(coalesce((SELECT max(minute) FROM rollup_runs) - interval '2 minutes', '-infinity'),
                    date_trunc('minute', now()) - interval '1 day') AS since,
           date_trunc('minute', now()) + CASE WHEN %(open)s THEN interval '1 minute' ELSE interval '0' END AS until),
started AS (
    SELECT date_trunc('minute', started_at) AS minute, count(*) AS n FROM runs
    WHERE started_at >= (SELECT since FROM span) AND started_at < (SELECT until FROM span) GROUP BY 1),
finished AS (
    SELECT date_trunc('minute', finished_at) AS minute, count(*) AS n,
           count(*) FILTER (WHERE state = 'failed') AS failed
    FROM runs
    WHERE finished_at >= (SELECT since FROM span) AND finished_at < (SELECT until FROM span) GROUP BY 1),
counted AS (
    INSERT INTO rollup_runs AS r (minute, started, finished, failed)
    SELECT m.minute, coalesce(s.n, 0), coalesce(f.n, 0), coalesce(f.failed, 0)
    FROM span
    CROSS JOIN LATERAL generate_series(span.since, span.until - interval '1 minute', interval '1 minute') AS m(minute)
    LEFT JOIN started s ON s.minute = m.minute
    LEFT JOIN finished f ON f.minute = m.minute
    ORDER BY m.minute
    ON CONFLICT (minute) DO UPDATE
    SET started = EXCLUDED.started, finished = EXCLUDED.finished, failed = EXCLUDED.failed
    RETURNING minute),
sampled AS (
    INSERT INTO rollup_queues AS r (minute, queue, depth, oldest_age)
    SELECT date_trunc('minute', now()), s.queue, s.depth, s.age
    FROM unnest(%(queues)s::text[], %(depths)s::bigint[], %(ages)s::float8[]) AS s(queue, depth, age)
    ORDER BY s.queue
    ON CONFLICT (minute, queue) DO UPDATE SET depth = EXCLUDED.depth, oldest_age = EXCLUDED.oldest_age
    RETURNING 1),
old AS (SELECT date_trunc('minute', now()) - make_interval(secs => %(keep)s) AS before),
gone_runs AS (DELETE FROM rollup_runs WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_queues AS (DELETE FROM rollup_queues WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_latency AS (DELETE FROM rollup_latency WHERE minute < (SELECT before FROM old) RETURNING 1),
gone_flushes AS (DELETE FROM rollup_flushes WHERE at < now() - interval '1 hour' RETURNING 1)
SELECT (SELECT count(*) FROM counted) AS minutes, (SELECT min(minute) FROM counted) AS since,
       (SELECT max(minute) FROM counted) AS until, (SELECT count(*) FROM sampled) AS queues,
       (SELECT count(*) FROM gone_runs) + (SELECT count(*) FROM gone_queues)
       + (SELECT count(*) FROM gone_latency) AS deleted;

-- name: chart_runs
-- The charts' reads: a window's rows, through each table's primary key (minute first).
SELECT minute, started, finished, failed FROM rollup_runs
WHERE minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
ORDER BY minute;

-- name: chart_queues
SELECT minute, queue, depth, oldest_age FROM rollup_queues
WHERE minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
ORDER BY queue, minute;

-- name: chart_latency
-- Each tool's bucket counts summed over the last %(recent)s seconds and over the last %(seconds)s:
-- at most a day of minutes x tools rows read.
SELECT l.tool, u.i, sum(u.c) FILTER (WHERE l.minute >= date_trunc('minute', now()) - make_interval(secs => %(recent)s)) AS recent,
       sum(u.c) AS whole
FROM rollup_latency l, unnest(l.counts) WITH ORDINALITY AS u(c, i)
WHERE l.minute >= date_trunc('minute', now()) - make_interval(secs => %(seconds)s)
GROUP BY l.tool, u.i
ORDER BY l.tool, u.i;
