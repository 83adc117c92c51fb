-- compat: expand
-- Version 24: a placeholder (another branch owns this number; drop at merge).
SELECT 1;
