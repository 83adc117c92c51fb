-- compat: expand
-- Version 23: the lease holder's condition and the states a lease is held in, said once (as 0015's
-- facts are): the fenced changes spelled `fencing_token = %(token)s AND state IN ('running',
-- 'cancelling')`, and the claim, the sweeper and the gauges the list, about fifteen times. Both are
-- LANGUAGE sql IMMUTABLE functions of one expression, not STRICT, each argument used once: Postgres
-- inlines them into the statement that calls them, so its plan is the one the fact spelled out
-- had (the claim and the fenced append read the run by its primary key as before:
-- tests/integration/test_queries.py). New functions only: older code does not call them.

-- A state in which a worker holds the run's lease (or held it, until it expired): `running`, or
-- `cancelling` while its compensations run. Not 0015's `outlast_live`, which is about a worker.
CREATE FUNCTION outlast_leased(state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('running', 'cancelling')
$$;

-- The run is held by the lease holder of `token`: its fencing token is that one (no claim since)
-- and it is in a leased state (not ended, nor waiting, under that token). Called with the run's
-- own columns: `outlast_held_by(fencing_token, state, %(token)s)`.
CREATE FUNCTION outlast_held_by(fencing_token bigint, state text, token bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT fencing_token = token AND outlast_leased(state)
$$;
