-- The schema's own statements (migrate.py): the version recorded, a migration's lock wait and
-- its concurrent index builds, and the workers whose code a contract migration waits for (0022).

-- name: schema_version
-- The version migrate recorded, and the oldest code (by the version it knows) that may run on it.
SELECT key, value FROM outlast_meta WHERE key IN ('schema_version', 'oldest_code');

-- name: record_version
INSERT INTO outlast_meta (key, value) VALUES ('schema_version', %(version)s), ('oldest_code', %(oldest)s)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;

-- name: lock_timeout
-- A migration's statements give way after this long waiting for a lock (migrate.LOCK_WAIT).
SELECT set_config('lock_timeout', %(ms)s, %(local)s);

-- name: has_runs
-- Whether the schema holds a run: a `transaction: none` migration of a schema with none runs in one
-- transaction, its indexes built at once (docs/upgrading.md).
SELECT EXISTS (SELECT 1 FROM runs) AS yes;

-- name: invalid_index
-- An index of the schema that a concurrent build left invalid (it gave way, or its migrate died).
SELECT 1 AS invalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE c.relname = %(index)s AND NOT i.indisvalid
  AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema());

-- name: workers_say_code
-- Whether workers say which schema version their code knows (0022 on).
SELECT 1 AS yes WHERE to_regclass('worker_code') IS NOT NULL;

-- name: older_workers
-- Live workers whose code knows fewer migrations than %(needs)s (none said: code before 0022).
SELECT w.name, c.code_version FROM workers w LEFT JOIN worker_code c USING (name)
WHERE outlast_live(w.last_beat, w.lease_ttl) AND coalesce(c.code_version, 0) < %(needs)s ORDER BY w.name;
