-- compat: expand
-- Version 32: a run's size is visible. `journal_bytes` counts the bytes of the journal entries the
-- run has written in its life (every generation: carrying forward does not reset it), added by the
-- statement that appends them from the worker's own count of what it sends, so that no sum is ever
-- taken on a write; runs journaled before this version count from here. `size_warned_at` is when
-- the count first passed OUTLAST_RUN_SIZE_WARN (the run's one 'size_warning' event is written by
-- the same statement). Columns older code never reads.

ALTER TABLE runs ADD COLUMN IF NOT EXISTS journal_bytes bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS size_warned_at timestamptz;
