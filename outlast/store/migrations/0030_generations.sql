-- compat: expand
-- Version 30: a run carried forward (`run.carry_forward`). A run's journal has generations: the
-- current one in `journal`, as before, and the earlier ones moved, entry for entry, to
-- `journal_past` when the run carried forward, each with its row in `generations` (the input it
-- started with, its chain's head and length). The run row says which generation is current
-- (`generation`), the operations numbered before it (`op_base`: the next generation's operation ids
-- go on from there, so an operation id, and the idempotency key made of it, is never used twice in
-- a run) and the input the current generation started with (`carried`; NULL in generation 0, which
-- started with `input`, kept as enqueued so that enqueueing the same run id again still compares
-- with what was enqueued). Columns older code never reads, and tables it never touches.

ALTER TABLE runs ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS op_base integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS carried jsonb;

-- One row per ended generation of a run: what it started with and where its chain ended.
CREATE TABLE IF NOT EXISTS generations (
    run_id       text NOT NULL,
    generation   integer NOT NULL,
    input        jsonb NOT NULL,
    op_base      integer NOT NULL,
    journal_head text NOT NULL,
    journal_len  integer NOT NULL,
    carried_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, generation)
);
CREATE INDEX IF NOT EXISTS generations_by_carried ON generations (carried_at);

-- The entries of the ended generations, as they were in `journal` (no trigger: what they showed,
-- state and events, was projected when they were first written).
CREATE TABLE IF NOT EXISTS journal_past (
    run_id     text NOT NULL,
    generation integer NOT NULL,
    seq        integer NOT NULL,
    kind       text NOT NULL,
    op_id      text,
    body       text NOT NULL,
    hash       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, generation, seq)
);
