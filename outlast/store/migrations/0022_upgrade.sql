-- compat: expand
-- transaction: none
-- Version 22: upgrading outlast with runs in flight (docs/upgrading.md). Statement by statement,
-- outside a transaction: the index is built CONCURRENTLY, while approvals are written.

-- The schema version each worker's code knows (its store's SCHEMA_VERSION, written by its every
-- beat): a contract migration is not applied while a live worker runs code older than it allows.
-- No row: a worker of code from before this migration, which does not say. A table of its own, not
-- a column of `workers`: older code reads `workers` whole (`SELECT *`), and a statement it prepared
-- fails once the table has one more column.
CREATE TABLE IF NOT EXISTS worker_code (
    name          text PRIMARY KEY REFERENCES workers (name) ON DELETE CASCADE,
    code_version  integer NOT NULL
);

-- The approvals inbox (the dashboard's, `pending_approvals`) reads the requests still pending,
-- oldest first: without this index, every approval ever decided of every run kept, at each look.
CREATE INDEX CONCURRENTLY IF NOT EXISTS approvals_pending ON approvals (created_at) WHERE status = 'pending';
