-- compat: expand
-- transaction: none
-- Version 26: typed requests a run publishes and waits on, answered from outside (requests.sql);
-- a run waiting on the first of several waits (`run.first`, reason 'first').

-- A request a workflow published (`run.request`): its id is the crossing's operation id, the same
-- on every resume; the payload shown to whoever answers, and the JSON schema of the response type
-- the answer is checked against before it is stored. `responders` empty: any operator may answer.
-- The first valid answer is written once; the same answer again changes nothing, another one is
-- refused. A request that lost a `run.first` is withdrawn. Deleted with its run.
CREATE TABLE IF NOT EXISTS requests (
    run_id              text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    op_id               text NOT NULL,
    name                text NOT NULL,
    payload             jsonb NOT NULL,
    response_schema     jsonb NOT NULL,
    responders          text[] NOT NULL DEFAULT '{}',
    expires_at          timestamptz,
    status              text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'answered', 'withdrawn')),
    answer              jsonb,
    answered_by         text,
    answered_by_detail  jsonb,
    answered_at         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, op_id)
);

-- The runs waiting on the first of several waits, one of them a child's result (`waits_for`): the
-- sweeper wakes those whose child is final (as `runs_waiting_child` serves reason 'child').
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_waiting_first ON runs (id)
    WHERE reason = 'first' AND waits_for IS NOT NULL;
