-- compat: expand
-- Version 25: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
