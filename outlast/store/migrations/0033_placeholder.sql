-- compat: expand
-- Version 33: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
