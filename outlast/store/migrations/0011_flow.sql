-- compat: contract
-- Version 11: concurrency slots. A cap of N on a key (a workflow, a workflow and its
-- concurrency key, a tool) is N numbered slots; a slot row is held by one run under its fencing
-- token until it expires (renewed with the run's lease), so a dead worker's slot frees itself
-- and a superseded worker's token holds nothing. The primary key makes two holders of one slot
-- impossible.
CREATE TABLE slots (
    key         text NOT NULL,      -- 'workflow:NAME', 'workflow:NAME:KEY' or 'tool:NAME'
    slot        integer NOT NULL,   -- 0 .. cap - 1
    run_id      text NOT NULL,
    holder      text NOT NULL,      -- '' for the run itself, else the operation id
    token       bigint NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key, slot)
);
CREATE INDEX slots_by_run ON slots (run_id);

-- A run parked for a slot names the key it waits for: a release wakes the first due run parked
-- for that key at once (its wake time set to now: the sweeper publishes it), instead of its retry.
ALTER TABLE runs ADD COLUMN slot_key text;
CREATE INDEX runs_parked_for_slot ON runs (slot_key, wake_at)
    WHERE state = 'waiting' AND reason = 'concurrency_slot';
