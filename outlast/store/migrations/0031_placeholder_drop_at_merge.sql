-- compat: expand
-- Version 31: a stand-in for another branch's migration 31 (this branch's own is 0034); drop at merge.
SELECT 1;
