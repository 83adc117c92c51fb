-- compat: expand
-- Version 33: a stand-in for another branch's migration 33 (this branch's own is 0034); drop at merge.
SELECT 1;
