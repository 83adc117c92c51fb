-- compat: expand
-- Version 17: the last writes that did not find their own effect when sent again after a commit
-- whose acknowledgement was lost.

-- An operation's use is settled once: `settle` writes this row with the spending, and a settle of
-- the same operation sent again (a lost acknowledgement, or a superseded worker's) finds it and
-- spends nothing, with or without a reservation to replace.
CREATE TABLE settlements (
    run_id      text NOT NULL,
    op_id       text NOT NULL,
    settled_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, op_id)
);

-- The write that made an event (`add_event`: an id its caller draws once per event): sent again,
-- the statement finds that event instead of adding a second one. NULL for every other event,
-- which is written with its run's own change and found through it.
ALTER TABLE events ADD COLUMN write_id text;
