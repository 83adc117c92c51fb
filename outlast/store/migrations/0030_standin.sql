-- compat: expand
-- Version 30: a local stand-in for another branch's migration (never committed).
SELECT 1;
