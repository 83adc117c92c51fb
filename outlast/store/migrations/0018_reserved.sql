-- Version 18: a placeholder on the re-run branch (its migration is 0020; 18 belongs to another
-- branch). Replaced by that branch's 0018 when both are merged.
SELECT 1;
