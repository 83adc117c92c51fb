-- compat: contract
-- Version 8: who decided, as authenticated. A request the workflow made with
-- ``authenticated=True`` is decided only by a principal the dashboard or the API authenticated
-- (never the CLI's asserted name); every decision keeps the decider's record (principal, groups,
-- how authenticated, from where, and the name given with --as when there was one).
ALTER TABLE approvals ADD COLUMN authenticated boolean NOT NULL DEFAULT false;
ALTER TABLE approvals ADD COLUMN decided_by_detail jsonb;
