-- compat: expand
-- Version 34: an operator's pauses (pauses.sql) in a table of their own, one row a pause of a run,
-- a workflow or a queue (its scope) and its target (the run's id, the workflow's or the queue's
-- name): who paused it (`by`, the principal's record), why, and when; and "the pauses that hold a
-- run" (its own, its workflow's, its queue's), said once: `outlast_pauses_of`, STABLE and one
-- SELECT, so that Postgres inlines it (three lookups of the primary key). Expand: older code
-- never pauses.

CREATE TABLE pauses (
    scope  text NOT NULL CHECK (scope IN ('run', 'workflow', 'queue')),
    target text NOT NULL,
    by     jsonb,
    why    text NOT NULL DEFAULT '',
    at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, target)
);

-- The pauses that hold a run: its own, its workflow's, its queue's (ordered by the caller).
CREATE FUNCTION outlast_pauses_of(run text, workflow text, queue text) RETURNS SETOF pauses
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT * FROM pauses
    WHERE (scope, target) IN (('run', run), ('workflow', workflow), ('queue', queue))
$$;
