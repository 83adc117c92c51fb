-- compat: expand
-- Version 31: a run's event written by one function, as procrastinate writes its events: the
-- statements of store/sql/*.sql spelled `INSERT INTO events (run_id, kind, detail) ...` about twenty
-- times, each in a CTE of the state change it records (same statement, same commit, under the run
-- row's lock). They now call `outlast_event` where they return the run, in FROM (a call in FROM that
-- names a column of an earlier item is run once per row of it):
--     SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
-- A function that writes is not inlined: it is planned and run on its own, once per event (one
-- INSERT of one row, as before). New function only: older code does not call it.

-- One event of a run: its kind and detail, and the id of a write that may be run again after a
-- lost acknowledgement (add_event, cancel and requeue_dead_letter look for it first). Its id back.
CREATE FUNCTION outlast_event(run text, kind text, detail jsonb, write_id text DEFAULT NULL)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    INSERT INTO events (run_id, kind, detail, write_id) VALUES ($1, $2, $3, $4) RETURNING id
$$;
