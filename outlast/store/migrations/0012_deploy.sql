-- compat: contract
-- Version 12: rolling deploys and priorities.

-- Which program identities were served lately, per queue and workflow: upserted by every worker's
-- heartbeat and kept after the worker stops. A worker that cannot serve a run's program hands
-- the run back to the queue while a worker served that program within OUTLAST_PROGRAM_GRACE
-- seconds, and parks it (waiting, program_changed) only after.
CREATE TABLE served_programs (
    queue     text NOT NULL,
    workflow  text NOT NULL,
    program   text NOT NULL,
    last_seen timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, workflow, program)
);

-- A run's priority level: which of its queue's streams it is published to.
ALTER TABLE runs ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CHECK (priority IN ('high', 'normal', 'low'));
