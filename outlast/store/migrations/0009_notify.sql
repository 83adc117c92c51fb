-- compat: contract
-- Version 9: readers are woken by NOTIFY instead of polling; finished runs can be pruned.

-- Who waits for a run: the listening connection of a Client.wait or follow (its backend pid),
-- registered after its LISTEN and removed when it stops; rows of connections gone are removed
-- by the sweeper. No foreign key: a pruned run's rows go with their connections.
CREATE TABLE watchers (
    run_id  text NOT NULL,
    pid     integer NOT NULL,
    since   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX watchers_by_run ON watchers (run_id);

-- Every change a reader waits for writes an event (every final state does), so one trigger on
-- events is enough, and it notifies only the runs someone watches: in Postgres every notifying
-- commit takes a database-wide lock and signals every listening backend of the database, which
-- would tax the writer's commits once per waiting client. The channel is the run's own
-- ('outlast_' || md5(schema.run_id)), the payload empty: identical notifications of a
-- transaction are folded into one. Per row, not per statement: a statement inserts one event,
-- and a transition table cost twice as much (bench/notify_cost.py --commits). The lookup runs
-- after the statement, with a snapshot of its own: a watcher registered while the statement
-- waited for the run's row lock (see the query `watch`) is seen.
CREATE FUNCTION outlast_notify_events() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
        PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH ROW EXECUTE FUNCTION outlast_notify_events();

-- Pruning finds the oldest finished runs, a run's continuations and a budget's sharers by index
-- (runs_by_parent also spares the foreign key check of each deleted run a scan of every run).
CREATE INDEX runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX runs_by_budget ON runs (budget_id) WHERE budget_id IS NOT NULL;
