-- Version 16: a placeholder on the dashboard's branch (its run-list indexes are 0017; 16 belongs
-- to another branch's migration, renumbered). Replaced by that migration when both are merged.
SELECT 1;
