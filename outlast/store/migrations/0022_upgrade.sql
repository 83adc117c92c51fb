-- compat: expand
-- Version 22: upgrading outlast with runs in flight (docs/upgrading.md).

-- The schema version each worker's code knows (its store's SCHEMA_VERSION, written by its every
-- beat): a contract migration is not applied while a live worker runs code older than it allows.
-- No row: a worker of code from before this migration, which does not say. A table of its own, not
-- a column of `workers`: older code reads `workers` whole (`SELECT *`), and a statement it prepared
-- fails once the table has one more column.
CREATE TABLE worker_code (
    name          text PRIMARY KEY REFERENCES workers (name) ON DELETE CASCADE,
    code_version  integer NOT NULL
);
