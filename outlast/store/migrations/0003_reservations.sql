-- compat: contract
-- Version 3: a reservation belongs to one operation, so that a retried dispatch never reserves
-- twice and a superseded worker cannot settle what the new owner settles.

-- No index on owner: leases are renewed by run id, and such an index misled the planner. Some
-- databases at version 2 never had it (it was dropped without a new version), hence IF EXISTS.
DROP INDEX IF EXISTS runs_by_owner;

CREATE TABLE reservations (
    budget_id   text NOT NULL,
    run_id      text NOT NULL,
    op_id       text NOT NULL,
    name        text NOT NULL,
    amount      numeric NOT NULL,
    PRIMARY KEY (run_id, op_id, name)
);
