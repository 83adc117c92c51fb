-- Version 18: a placeholder on the clock branch (its migration is 0021; 18 belongs to another
-- branch). Replaced by that branch's 0018 when both are merged.
SELECT 1;
