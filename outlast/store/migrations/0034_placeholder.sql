-- compat: expand
-- Version 34: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
