-- compat: expand
-- Version 32: a stand-in for another branch's migration 32 (this branch's own is 0034); drop at merge.
SELECT 1;
