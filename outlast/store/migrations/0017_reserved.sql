-- Version 17: a placeholder on the clock branch (its migration is 0021; 17 belongs to another
-- branch). Replaced by that branch's 0017 when both are merged.
SELECT 1;
