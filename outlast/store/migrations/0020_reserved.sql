-- Version 20: a placeholder on the clock branch (its migration is 0021; 20 belongs to another
-- branch). Replaced by that branch's 0020 when both are merged.
SELECT 1;
