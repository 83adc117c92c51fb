-- outlast: the whole Postgres schema. Applied by `outlast migrate` inside the configured schema
-- (search_path), idempotently. Bump schema_version below when this file changes.
-- Postgres is the source of truth; Redis only hands work out.

CREATE TABLE IF NOT EXISTS outlast_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE IF NOT EXISTS runs (
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
CREATE INDEX IF NOT EXISTS runs_unfinished ON runs (published_at)
    WHERE state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling');
CREATE INDEX IF NOT EXISTS runs_deadline ON runs (deadline)
    WHERE deadline IS NOT NULL
      AND state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling');
CREATE INDEX IF NOT EXISTS runs_by_state ON runs (state, created_at DESC);
-- (no index on owner: leases are renewed by run id, and such an index misled the planner)
DROP INDEX IF EXISTS runs_by_owner;

-- A finished run never changes, whoever writes: refused by the database itself. The whole row
-- (version 4): its input and workflow are the record of what ran, as its result is. An UPDATE
-- that leaves every column as it was is let through.
CREATE OR REPLACE FUNCTION outlast_final_is_final() RETURNS trigger AS $$
BEGIN
    IF OLD.state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
       AND NEW IS DISTINCT FROM OLD THEN
        RAISE EXCEPTION 'run % is final (%): a finished run never changes', OLD.id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS runs_final_is_final ON runs;
CREATE TRIGGER runs_final_is_final BEFORE UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION outlast_final_is_final();

-- The journal: append-only, one entry per crossing. `body` is the canonical JSON of the entry
-- and `hash` = sha256(previous hash || body): the run row keeps the head.
CREATE TABLE IF NOT EXISTS journal (
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
CREATE TABLE IF NOT EXISTS events (
    id          bigserial PRIMARY KEY,
    run_id      text NOT NULL REFERENCES runs (id),
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, id);

-- Version 2: cancellation, budgets shared along a chain of continued runs.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS budget_id text;

-- An approval request is bound to the exact action: tool, canonical args and their hash, policy
-- version, who may approve, expiry (database clock). A decision is written once; the same
-- decision again changes nothing, another one is refused.
CREATE TABLE IF NOT EXISTS approvals (
    id              text PRIMARY KEY,
    run_id          text NOT NULL REFERENCES runs (id),
    op_id           text NOT NULL,
    action          text NOT NULL,
    args            jsonb NOT NULL,
    args_hash       text NOT NULL,
    policy_version  text NOT NULL DEFAULT '',
    approvers       text[] NOT NULL,
    expires_at      timestamptz,
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'approved', 'rejected', 'revised')),
    decided_by      text,
    comment         text,
    new_args        jsonb,
    decided_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, op_id)
);

-- Named limits, shared by a run and the runs that continue it. A dispatch reserves its estimate
-- in one conditional statement; the result replaces the reservation with the actual use.
CREATE TABLE IF NOT EXISTS budgets (
    budget_id   text NOT NULL,
    name        text NOT NULL,
    limit_value numeric NOT NULL CHECK (limit_value >= 0),
    spent       numeric NOT NULL DEFAULT 0,
    reserved    numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (budget_id, name)
);

-- Version 3: a reservation belongs to one operation, so that a retried dispatch never reserves
-- twice and a superseded worker cannot settle what the new owner settles.
CREATE TABLE IF NOT EXISTS reservations (
    budget_id   text NOT NULL,
    run_id      text NOT NULL,
    op_id       text NOT NULL,
    name        text NOT NULL,
    amount      numeric NOT NULL,
    PRIMARY KEY (run_id, op_id, name)
);

INSERT INTO outlast_meta (key, value) VALUES ('schema_version', '4')
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
    WHERE outlast_meta.value::int < EXCLUDED.value::int;
