-- compat: expand
-- Version 33: the payload store. A journal entry whose body would pass OUTLAST_MAX_PAYLOAD holds
-- its largest values by reference (SHA-256, size, media type: outlast/_payloads.py); each value is
-- a row here, once per run. `body` holds its bytes, or is NULL where they are in the object store
-- that OUTLAST_PAYLOAD_STORE names (under RUN/SHA256). `journaled`: a journal entry of the run is
-- known to refer to it (the sweeper sets it, once past the grace); a row past the grace that no
-- entry refers to (its worker died between storing it and journaling the reference), or whose run
-- is gone (pruned), is marked `swept`, its object deleted, then its row. A table older code never
-- reads.

CREATE TABLE IF NOT EXISTS payloads (
    run_id     text NOT NULL,
    sha256     text NOT NULL,
    size       bigint NOT NULL,
    media_type text NOT NULL,
    body       bytea,
    journaled  boolean NOT NULL DEFAULT false,
    swept      boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, sha256)
);
CREATE INDEX IF NOT EXISTS payloads_unjournaled ON payloads (created_at) WHERE NOT journaled;
CREATE INDEX IF NOT EXISTS payloads_swept ON payloads (run_id) WHERE swept;

-- The bytes a run holds in the payload store (what `outlast status` may show beside its journal).
CREATE OR REPLACE FUNCTION outlast_payload_bytes(run text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(sum(size), 0)::bigint FROM payloads WHERE run_id = run
$$;
