-- Version 19: a placeholder on the clock branch (its migration is 0021; 19 belongs to another
-- branch). Replaced by that branch's 0019 when both are merged.
SELECT 1;
