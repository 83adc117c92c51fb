-- Version 5: readers are woken by NOTIFY instead of polling; finished runs can be pruned.

-- Every change a reader waits for writes an event (every final state does), so one trigger on
-- events is enough. It is per statement, not per row, and notifies each run once on a channel of
-- the run's own ('outlast_' || md5(schema.run_id)) with an empty payload: Postgres folds the
-- identical notifications of a transaction into one. Journal appends notify nothing.
CREATE FUNCTION outlast_notify_events() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || changed.run_id), '')
    FROM (SELECT DISTINCT run_id FROM new_events) AS changed;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER events_notify AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION outlast_notify_events();

-- Pruning finds the oldest finished runs, a run's continuations and a budget's sharers by index
-- (runs_by_parent also spares the foreign key check of each deleted run a scan of every run).
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_by_budget ON runs (budget_id) WHERE budget_id IS NOT NULL;
