-- compat: expand
-- Version 35: an operator's pauses (pauses.sql) in a table of their own, one row a pause of a run,
-- a workflow or a queue (its scope) and its target (the run's id, the workflow's or the queue's
-- name): who paused it (`by`, the principal's record), why, and when. Until now they were rows of
-- outlast_meta keyed `pause:SCOPE:TARGET`, copied here; and "the pauses that hold a run" (its own,
-- its workflow's, its queue's), spelled in five statements, is said once: `outlast_pauses_of`,
-- STABLE and one SELECT, so that Postgres inlines it (three lookups of the primary key).
-- Expand: older code reads and writes its pauses in outlast_meta, so each pause is mirrored there
-- while older workers may run (two triggers, each copying the other's writes, not its own copies:
-- pg_trigger_depth). A later contract drops the mirror and the outlast_meta rows.

CREATE TABLE pauses (
    scope  text NOT NULL CHECK (scope IN ('run', 'workflow', 'queue')),
    target text NOT NULL,
    by     jsonb,
    why    text NOT NULL DEFAULT '',
    at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, target)
);

INSERT INTO pauses (scope, target, by, why, at)
SELECT v ->> 'scope', v ->> 'target', v -> 'by', coalesce(v ->> 'why', ''),
       coalesce((v ->> 'at')::timestamptz, now())
FROM outlast_meta, LATERAL (SELECT value::jsonb AS v) p
WHERE starts_with(key, 'pause:')
ON CONFLICT DO NOTHING;

CREATE FUNCTION outlast_pause_to_meta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM outlast_meta WHERE key = 'pause:' || OLD.scope || ':' || OLD.target;
        RETURN OLD;
    END IF;
    INSERT INTO outlast_meta (key, value)
    VALUES ('pause:' || NEW.scope || ':' || NEW.target, to_jsonb(NEW)::text)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
    RETURN NEW;
END $$;

CREATE FUNCTION outlast_meta_to_pause() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM pauses WHERE 'pause:' || scope || ':' || target = OLD.key;
        RETURN OLD;
    END IF;
    INSERT INTO pauses (scope, target, by, why, at)
    SELECT v ->> 'scope', v ->> 'target', v -> 'by', coalesce(v ->> 'why', ''), coalesce((v ->> 'at')::timestamptz, now())
    FROM (SELECT NEW.value::jsonb AS v) p
    ON CONFLICT (scope, target) DO UPDATE SET by = EXCLUDED.by, why = EXCLUDED.why, at = EXCLUDED.at;
    RETURN NEW;
END $$;

CREATE TRIGGER pauses_mirrored AFTER INSERT OR UPDATE OR DELETE ON pauses
    FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION outlast_pause_to_meta();
CREATE TRIGGER meta_pauses_mirrored AFTER INSERT OR UPDATE ON outlast_meta
    FOR EACH ROW WHEN (pg_trigger_depth() < 1 AND starts_with(NEW.key, 'pause:'))
    EXECUTE FUNCTION outlast_meta_to_pause();
CREATE TRIGGER meta_pauses_lifted AFTER DELETE ON outlast_meta
    FOR EACH ROW WHEN (pg_trigger_depth() < 1 AND starts_with(OLD.key, 'pause:'))
    EXECUTE FUNCTION outlast_meta_to_pause();

-- The pauses that hold a run: its own, its workflow's, its queue's (ordered by the caller).
CREATE FUNCTION outlast_pauses_of(run text, workflow text, queue text) RETURNS SETOF pauses
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT * FROM pauses
    WHERE (scope, target) IN (('run', run), ('workflow', workflow), ('queue', queue))
$$;
