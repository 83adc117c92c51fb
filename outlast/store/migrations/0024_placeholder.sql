-- compat: expand
-- Version 24: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
