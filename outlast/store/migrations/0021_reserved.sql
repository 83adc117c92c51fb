-- compat: expand
-- Version 21: reserved for another branch's migration, merged with this one; this file is dropped
-- then (the numbers must have no gap meanwhile). It makes nothing.
SELECT 1;
