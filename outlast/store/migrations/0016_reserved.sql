-- Version 16: a placeholder on the worker's branch (its migration is 0017; 0016 belongs to
-- another branch). Replaced by that branch's migration when both are merged.
SELECT 1;
