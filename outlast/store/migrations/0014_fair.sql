-- compat: contract
-- Version 14: fair share across tenants within a queue (issue 12, item 7).

-- A queue's stream holds at most a window of each tenant's runs (OUTLAST_TENANT_WINDOW runs
-- published and not yet started); a tenant's run beyond it is held back: queued, with no stream
-- entry, published_at NULL (the sweeper's `due` never reads it: NULL is before no time). A claim
-- of one of the tenant's runs publishes its next held run, highest priority then oldest, in the
-- same statement; the sweeper tops every tenant's window up. One tenant's backlog then waits in
-- Postgres, not in front of another tenant's runs in the stream.
ALTER TABLE runs ALTER COLUMN published_at DROP NOT NULL;

-- A tenant's window in a queue: its queued runs published (by time: a delayed run is published at
-- its start, not before).
CREATE INDEX runs_tenant_window ON runs (queue, tenant, published_at)
    WHERE state = 'queued' AND tenant IS NOT NULL AND published_at IS NOT NULL;

-- A tenant's held runs in a queue, in the order they are published.
CREATE INDEX runs_held ON runs (
    queue, tenant, (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END), created_at)
    WHERE state = 'queued' AND published_at IS NULL;
