-- compat: contract
-- Version 1: runs, their journal and events; a final state never changes.
-- Each file in this directory is applied once, in its own transaction (unless it says
-- `transaction: none`), inside the configured schema (search_path), by `outlast migrate`, which
-- records its number in outlast_meta. A file that has shipped never changes what it makes: a change
-- to the schema is a new file, numbered next. Each says whether older code keeps working on it
-- (`compat: expand`) or not (`compat: contract`): docs/upgrading.md. The files before 0015 were
-- not reviewed for it and count as contracts.

CREATE TABLE outlast_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE runs (
    id                  text PRIMARY KEY,
    workflow            text NOT NULL,
    queue               text NOT NULL DEFAULT 'default',
    input               jsonb NOT NULL,
    input_hash          text NOT NULL,
    state               text NOT NULL DEFAULT 'queued' CHECK (state IN (
                            'queued', 'running', 'waiting', 'awaiting_approval', 'cancelling',
                            'succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')),
    reason              text,
    result              jsonb,
    error               jsonb,
    program             text,            -- identity that admitted it: "version:fingerprint"
    fencing_token       bigint NOT NULL DEFAULT 0,
    owner               text,
    lease_expires_at    timestamptz,
    attempts            integer NOT NULL DEFAULT 0,   -- claims since the run last made durable progress
    deadline            timestamptz,
    wake_at             timestamptz,     -- when a waiting run is due (timer, approval expiry)
    parent_id           text REFERENCES runs (id),    -- the run this one continues
    journal_head        text NOT NULL DEFAULT '',
    journal_len         integer NOT NULL DEFAULT 0,
    published_at        timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);

-- The sweeper's and the status page's hot queries touch only unfinished runs: the partial
-- index keeps their cost independent of how many runs have finished.
CREATE INDEX runs_unfinished ON runs (published_at)
    WHERE state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling');
CREATE INDEX runs_by_state ON runs (state, created_at DESC);
CREATE INDEX runs_by_owner ON runs (owner) WHERE state = 'running';  -- dropped by 0003

-- A final state never changes, whoever writes: refused by the database itself.
CREATE FUNCTION outlast_final_is_final() RETURNS trigger AS $$
BEGIN
    IF OLD.state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
       AND (NEW.state IS DISTINCT FROM OLD.state
            OR NEW.result IS DISTINCT FROM OLD.result
            OR NEW.error IS DISTINCT FROM OLD.error) THEN
        RAISE EXCEPTION 'run % is final (%): a final state never changes', OLD.id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE TRIGGER runs_final_is_final BEFORE UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION outlast_final_is_final();

-- The journal: append-only, one entry per crossing. `body` is the canonical JSON of the entry
-- and `hash` = sha256(previous hash || body): the run row keeps the head.
CREATE TABLE journal (
    run_id      text NOT NULL REFERENCES runs (id),
    seq         integer NOT NULL,
    kind        text NOT NULL,
    op_id       text,
    body        text NOT NULL,
    hash        text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, seq)
);

-- What happened to a run, for people: state changes, refusals, resolutions.
CREATE TABLE events (
    id          bigserial PRIMARY KEY,
    run_id      text NOT NULL REFERENCES runs (id),
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_run ON events (run_id, id);
