-- compat: contract
-- Version 2: deadlines, cancellation, approvals bound to the action, budgets shared along a
-- chain of continued runs.

CREATE INDEX runs_deadline ON runs (deadline)
    WHERE deadline IS NOT NULL
      AND state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling');

ALTER TABLE runs ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD COLUMN budget_id text;

-- An approval request is bound to the exact action: tool, canonical args and their hash, policy
-- version, who may approve, expiry (database clock). A decision is written once; the same
-- decision again changes nothing, another one is refused.
CREATE TABLE approvals (
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
CREATE TABLE budgets (
    budget_id   text NOT NULL,
    name        text NOT NULL,
    limit_value numeric NOT NULL CHECK (limit_value >= 0),
    spent       numeric NOT NULL DEFAULT 0,
    reserved    numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (budget_id, name)
);
