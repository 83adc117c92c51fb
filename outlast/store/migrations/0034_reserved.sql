-- compat: expand
-- Version 34: a placeholder on this branch for another branch's migration 34 (migrations are
-- numbered without gaps): it makes nothing. Drop it at the merge, where that migration takes its
-- number.
SELECT 1;
