-- Version 15: a placeholder on the dashboard's branch (its migration is 0016; 0015 belongs to
-- another branch). Replaced by that branch's 0015 when both are merged.
SELECT 1;
