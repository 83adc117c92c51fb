-- compat: contract
-- Version 10: delayed runs and schedules.

-- A delayed run is queued with its start time and is not delivered before it. Its published_at
-- is set to that time at insert: the sweeper's pass over the unfinished runs (the partial index
-- runs_unfinished, ordered by published_at, read up to the pass's cutoff) never reads a run that
-- starts later, however many wait, and publishes each at its time (the `due` query).
ALTER TABLE runs ADD COLUMN start_at timestamptz;

-- A schedule, declared in code (@app.schedule) and recorded here by every worker serving it;
-- `paused` and `last_tick` are the schedule's own state and survive redeclaration. last_tick is
-- the newest tick handled (enqueued or skipped by its catch_up): the sweeper enqueues the ticks
-- after it. A tick's run id is derived from the schedule's name and the tick's time, so a tick
-- enqueued twice (two workers, a restart) is one run.
CREATE TABLE schedules (
    name        text PRIMARY KEY,
    workflow    text NOT NULL,
    queue       text NOT NULL,
    cron        text NOT NULL,
    tz          text NOT NULL,
    input       jsonb NOT NULL,
    catch_up    text NOT NULL CHECK (catch_up IN ('latest', 'none', 'all')),
    paused      boolean NOT NULL DEFAULT false,
    last_tick   timestamptz NOT NULL DEFAULT now(),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
