-- compat: expand
-- Version 15: facts that queries.sql spelled several times, each said once here. Every one is a
-- LANGUAGE sql function that Postgres inlines into the statement that calls it (a scalar one into
-- the expression, a set-returning one into the FROM list), so each statement's plan is the one it
-- had with the fact spelled out: none is SECURITY DEFINER, STRICT or has a SET clause, each scalar
-- body is one expression, and none is VOLATILE. Bodies name tables unqualified: an inlined body is
-- parsed under the caller's search_path, the schema whose statement it is.

-- A final state: the run never changes again (0004's trigger refuses it).
CREATE FUNCTION outlast_final(state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
$$;

-- An unfinished state: the one list of 0001's partial index `runs_unfinished`; spelled the same, a
-- query that says `outlast_unfinished(state)` can use that index.
CREATE FUNCTION outlast_unfinished(state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling')
$$;

-- A live worker: its last heartbeat within three of its lease TTLs (it renews every third of one).
CREATE FUNCTION outlast_live(last_beat timestamptz, lease_ttl double precision) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT last_beat >= now() - make_interval(secs => 3 * lease_ttl)
$$;

-- How full a tenant's window is in a queue (0014_fair): its queued runs published and not yet
-- started, the run `but` left out, counted up to `size` (no further: the window is full then).
-- A `but` written NULL is folded away when the statement is planned: its count stays an index-only
-- scan of `runs_tenant_window` (no run's id is in that index).
-- Called as `(SELECT used FROM outlast_window(...))`: a set-returning function, as only those are
-- inlined with a FROM list of their own.
CREATE FUNCTION outlast_window(queue text, tenant text, size integer, but text)
RETURNS TABLE (used bigint) LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM runs w
        WHERE w.state = 'queued' AND w.tenant = $2 AND w.published_at IS NOT NULL
          AND w.queue = $1 AND w.published_at <= now() AND ($4 IS NULL OR w.id <> $4)
        LIMIT $3) n
$$;

-- A fenced change run again after a commit whose acknowledgement was lost finds its own effect: the
-- run, still under the token, in the state (and, unless `reason` is NULL, for the reason) the change
-- set. Called in FROM.
CREATE FUNCTION outlast_redone(run text, token bigint, state text, reason text) RETURNS SETOF runs
LANGUAGE sql STABLE AS $$
    SELECT * FROM runs r
    WHERE r.id = $1 AND r.fencing_token = $2 AND r.state = $3 AND ($4 IS NULL OR r.reason = $4)
$$;
