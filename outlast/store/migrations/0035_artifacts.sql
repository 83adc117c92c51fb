-- compat: expand
-- Version 35: artifacts. A file a workflow or a tool saved as an artifact of its run is one row
-- here, by (run, operation, name): its bytes are a value of the payload store (0033, by SHA-256),
-- this row the index (hash, size, media type, when). `keep`: the row outlives its run's pruning
-- (the payload sweeper keeps a value an artifact refers to); otherwise it goes with its run. A
-- table older code never reads.

CREATE TABLE IF NOT EXISTS artifacts (
    run_id     text NOT NULL,
    op_id      text NOT NULL,
    name       text NOT NULL,
    sha256     text NOT NULL,
    size       bigint NOT NULL,
    media_type text NOT NULL,
    keep       boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, op_id, name)
);
CREATE INDEX IF NOT EXISTS artifacts_payload ON artifacts (run_id, sha256);
