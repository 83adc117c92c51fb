-- compat: contract
-- Version 7: the heartbeat record of each worker process, upserted on every heartbeat (one
-- statement, the database clock) and deleted when the worker stops cleanly. A row whose last
-- beat is older than three of its lease TTLs is shown as gone; the sweeper deletes it later.
CREATE TABLE workers (
    name        text PRIMARY KEY,                  -- the consumer name: HOST-PID-XXXX
    host        text NOT NULL,
    pid         integer NOT NULL,
    queues      text[] NOT NULL,
    programs    jsonb NOT NULL DEFAULT '{}',       -- workflow -> program identity it serves
    concurrency integer NOT NULL,
    lease_ttl   double precision NOT NULL,
    runs_held   integer NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_beat   timestamptz NOT NULL DEFAULT now()
);
