-- Version 19: a placeholder on the re-run branch (its migration is 0020; 19 belongs to another
-- branch). Replaced by that branch's 0019 when both are merged.
SELECT 1;
