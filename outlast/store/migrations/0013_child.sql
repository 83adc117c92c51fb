-- compat: contract
-- Version 13: child runs and tenants (issue 12, items 6 and 7).

-- Whose run it is: given at enqueue, kept by continuations and child runs.
ALTER TABLE runs ADD COLUMN tenant text;
-- The run whose operation started this one (a child run); its id is derived from that operation.
-- No foreign key: a finished parent may be pruned before a child it did not wait for.
ALTER TABLE runs ADD COLUMN started_by text;
-- The child run that a run waiting with the reason 'child' waits for.
ALTER TABLE runs ADD COLUMN waits_for text;

CREATE INDEX runs_children ON runs (started_by) WHERE started_by IS NOT NULL;
CREATE INDEX runs_by_tenant ON runs (tenant, created_at DESC) WHERE tenant IS NOT NULL;
-- The sweeper's look for parents whose child ended: only runs waiting for a child.
CREATE INDEX runs_waiting_child ON runs (id) WHERE state = 'waiting' AND reason = 'child';
