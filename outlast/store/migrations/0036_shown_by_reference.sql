-- compat: expand
-- Version 36: a state value or a custom event's data past OUTLAST_MAX_PAYLOAD is held by
-- reference (outlast/_payloads.py): its journal entry holds `{"$refs": {"value": ...}, "key": ...}`
-- (an event's, `"data"`), and the row it shows holds `{"$refs": {"value": reference}}` in its place,
-- which readers read back whole from the payload store. 0025's trigger, the same otherwise: an
-- entry with no reference shows its value as before.
CREATE OR REPLACE FUNCTION outlast_journal_shown() RETURNS trigger AS $$
DECLARE
    b jsonb := NEW.body::jsonb;
BEGIN
    IF NEW.kind = 'state' THEN
        INSERT INTO run_state (run_id, key, value, version, seq)
        VALUES (NEW.run_id, b->>'key',
                coalesce(b->'value', jsonb_build_object('$refs', b->'$refs')), 1, NEW.seq)
        ON CONFLICT (run_id, key) DO UPDATE
            SET value = EXCLUDED.value, version = run_state.version + 1, seq = EXCLUDED.seq,
                updated_at = now();
        IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
            PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
        END IF;
    ELSE
        INSERT INTO events (run_id, kind, detail)
        VALUES (NEW.run_id, 'custom:' || (b->>'event'),
                jsonb_build_object('data', coalesce(b->'data', jsonb_build_object('$refs', b->'$refs')),
                                   'op', NEW.op_id, 'seq', NEW.seq));
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
