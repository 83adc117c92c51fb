-- compat: expand
-- Version 21: the dashboard's charts read a rollup of their own, never the runs or the journal.
-- One row per minute (and per queue, per tool), written by the workers' sweepers once a minute
-- (OUTLAST_ROLLUP_EVERY), kept eight days: at most minutes x (1 + queues + tools) rows, whatever
-- the number of runs. Nothing is written on an operation's path, and the journal gets no index.
--
-- Runs started, finished and failed per minute: counted from runs.started_at and finished_at
-- (through runs_by_started and runs_by_finished, 0020) by the one worker whose turn it is.
CREATE TABLE rollup_runs (
    minute timestamptz PRIMARY KEY,
    started integer NOT NULL,
    finished integer NOT NULL,  -- in any final state
    failed integer NOT NULL     -- in the final state failed
);

-- Each queue's streams as Redis saw them at the minute, sampled by the same worker.
CREATE TABLE rollup_queues (
    minute timestamptz NOT NULL,
    queue text NOT NULL,
    depth bigint NOT NULL,                 -- entries not yet delivered to a worker
    oldest_age double precision NOT NULL,  -- seconds the oldest of them has waited (0: none)
    PRIMARY KEY (minute, queue)
);

-- Operations' latencies, per tool: every worker adds the bucket counts it kept in memory
-- (outlast/latency.py: a count per bound, then one above the last), once a minute.
CREATE TABLE rollup_latency (
    minute timestamptz NOT NULL,
    tool text NOT NULL,
    counts bigint[] NOT NULL,
    PRIMARY KEY (minute, tool)
);

-- A worker's flush of its latencies, by an id of its own: sent again after a lost
-- acknowledgement, it finds its id here and adds nothing. Kept an hour.
CREATE TABLE rollup_flushes (
    id text PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now()
);

-- Whose turn it is to count the runs and sample the queues: the worker whose conditional update
-- moves `at` on (one statement: one winner per step, with or without a pooler).
CREATE TABLE rollup_turn (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    at timestamptz NOT NULL
);
INSERT INTO rollup_turn (at) VALUES ('-infinity');

-- Two histograms' bucket counts added position by position.
CREATE FUNCTION outlast_add_counts(a bigint[], b bigint[]) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i)
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;
