-- compat: expand
-- Version 32: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
