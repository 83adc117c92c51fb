-- compat: expand
-- transaction: none
-- Version 20: the runs list at scale. Every list the dashboard, /api/runs and `outlast runs`
-- offer reads one index in its own order, a page at a time (keyset paging: the next page starts
-- after the last row's sort key and id), so a page costs the same at a million runs as at ten.
--
-- Run statement by statement, outside a transaction: the indexes are built CONCURRENTLY, so that
-- runs are written while they are built (a plain CREATE INDEX locks them out for as long as the
-- build takes: about a minute at a million runs). Every statement can run again (IF NOT EXISTS,
-- IF EXISTS, OR REPLACE): a migrate interrupted half-way starts it again from the top.

-- When a run was first taken by a worker: set once by `claim`, never changed after, so a list
-- sorted by it pages stably. Runs started before this migration have none (listed by created).
ALTER TABLE runs ADD COLUMN IF NOT EXISTS started_at timestamptz;

-- The unfiltered lists, one per sort; the id breaks ties so that a cursor is exact.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_created ON runs (created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_started ON runs (started_at DESC, id DESC) WHERE started_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS runs_finished;  -- (finished_at): prune's look now reads runs_by_finished
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_finished ON runs (finished_at DESC, id DESC) WHERE finished_at IS NOT NULL;

-- One filter, newest first: the filter's column, then the created time and the id.
DROP INDEX CONCURRENTLY IF EXISTS runs_by_state;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_state ON runs (state, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_workflow ON runs (workflow, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_queue ON runs (queue, created_at DESC, id DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_priority ON runs (priority, created_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS runs_by_tenant;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_tenant ON runs (tenant, created_at DESC, id DESC) WHERE tenant IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS runs_children;  -- (started_by): again, with the created time and id (the parent filter)
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_children ON runs (started_by, created_at DESC, id DESC) WHERE started_by IS NOT NULL;
-- Runs with an operation in doubt: few, so a small partial index.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_in_doubt ON runs (created_at DESC, id DESC) WHERE state = 'waiting' AND reason = 'in_doubt';

-- Search: an id prefix (byte order, whatever the database's collation), and a value in the input
-- (jsonb containment, `input @> '{"customer": "c-42"}'`).
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_id_prefix ON runs ((id COLLATE "C"));
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_by_input ON runs USING gin (input jsonb_path_ops);

-- Live lists (the dashboard's runs list, approvals and in-doubt pages) are woken by Postgres, not
-- by polling: a watcher registered for the run id '' (no run has an empty id) is told of every
-- event of every run, on the channel of '' ('outlast_' || md5(schema || '.')). Only while such a
-- watcher exists does a commit with an event notify: each notifying commit takes a database-wide
-- lock (0009), a cost paid only while someone looks at a live list.
CREATE OR REPLACE FUNCTION outlast_notify_events() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
        PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
    END IF;
    IF EXISTS (SELECT 1 FROM watchers WHERE run_id = '') THEN
        PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.'), '');
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
