-- compat: expand
-- Version 31: a placeholder for another branch's migration (dropped at merge).
SELECT 1;
