-- compat: expand
-- Version 25: what a run shows while it runs: the state it sets (`run.set_state`), one row a key
-- with a version, and the custom events it emits (`run.emit`), both written by the journal entry
-- that records them, in its own statement.

-- A run's state: the last value of each key, the number of times it was set (its version), and
-- the journal entry that set it. Written only by the trigger below; read by `client.state`.
CREATE TABLE run_state (
    run_id      text NOT NULL,
    key         text NOT NULL,
    value       jsonb NOT NULL,
    version     integer NOT NULL,
    seq         integer NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, key)
);

-- A journal entry of kind 'state' or 'event' is shown by the same statement that journals it: the
-- fenced append (or nothing, refused), so the state and the events never disagree with the
-- journal. An append sent again after a lost acknowledgement finds its entry and inserts nothing:
-- the row is written once, a replay writes nothing. A custom event's kind is `custom:` and the
-- kind the workflow gave (outlast's own kinds never hold a colon); it is written under the run
-- row's lock, which the append holds, so its id follows the run's other events in commit order.
-- A state change notifies the run's watchers as an event does (`client.wait_state`).
CREATE FUNCTION outlast_journal_shown() RETURNS trigger AS $$
DECLARE
    b jsonb := NEW.body::jsonb;
BEGIN
    IF NEW.kind = 'state' THEN
        INSERT INTO run_state (run_id, key, value, version, seq)
        VALUES (NEW.run_id, b->>'key', b->'value', 1, NEW.seq)
        ON CONFLICT (run_id, key) DO UPDATE
            SET value = EXCLUDED.value, version = run_state.version + 1, seq = EXCLUDED.seq,
                updated_at = now();
        IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
            PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
        END IF;
    ELSE
        INSERT INTO events (run_id, kind, detail)
        VALUES (NEW.run_id, 'custom:' || (b->>'event'),
                jsonb_build_object('data', b->'data', 'op', NEW.op_id, 'seq', NEW.seq));
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;

-- Only the entries it shows call it: every other append pays the WHEN test alone.
CREATE TRIGGER journal_shown AFTER INSERT ON journal
    FOR EACH ROW WHEN (NEW.kind IN ('state', 'event')) EXECUTE FUNCTION outlast_journal_shown();
