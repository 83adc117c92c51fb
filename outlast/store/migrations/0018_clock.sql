-- compat: expand
-- Version 18: one clock for claims, leases and due times. `outlast_now()` is the database clock
-- plus this schema's offset, a one-row table that is 0 outside tests: outlast.testing's advance()
-- moves it, so every due time of the schema comes nearer at once (timers, approval expiries,
-- deadlines, delayed starts, leases, schedules) and nothing stored is rewritten. A table, not a
-- setting: a setting belongs to a session, and every worker of a schema must read the same time.
-- Audit stamps (created_at, updated_at, finished_at, decided_at, journal and event times) and the
-- workers' heartbeats keep the database's own clock: they say when a thing happened on the machine.
CREATE TABLE clock (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    shift  interval NOT NULL DEFAULT '0'
);
INSERT INTO clock DEFAULT VALUES;

-- Called as `(SELECT at FROM outlast_now())`: set-returning, as only those are inlined with a FROM
-- list of their own (0015); the scalar subquery is then an InitPlan, read once per statement. A
-- scalar function with this body would be planned and run on its own at every row it is asked at.
CREATE FUNCTION outlast_now() RETURNS TABLE (at timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT now() + shift FROM clock
$$;

-- 0015's tenant window, with a run's publication stamp read against the same clock.
CREATE OR REPLACE FUNCTION outlast_window(queue text, tenant text, size integer, but text)
RETURNS TABLE (used bigint) LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM runs w
        WHERE w.state = 'queued' AND w.tenant = $2 AND w.published_at IS NOT NULL
          AND w.queue = $1 AND w.published_at <= (SELECT at FROM outlast_now()) AND ($4 IS NULL OR w.id <> $4)
        LIMIT $3) n
$$;
