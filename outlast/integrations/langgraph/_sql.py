"""This module says the checkpointer's SQL once: its tables (a schema of its own, created by ``SETUP``) and
every statement it runs, each a template whose ``{s}`` is the schema's name.

A checkpoint is one row of ``checkpoints`` without its channel values; a channel's value is one
row of ``blobs`` per version it had (``put`` writes only the channels that changed), found again
through the checkpoint's ``blob_versions`` (channel -> version, as text); a task's pending writes
are rows of ``writes`` keyed by checkpoint, task and index."""

from __future__ import annotations

from typing import LiteralString

SETUP: LiteralString = """
SELECT pg_advisory_xact_lock(hashtext('outlast_langgraph_setup'));
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.checkpoints (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    checkpoint_id text NOT NULL,
    parent_checkpoint_id text,
    checkpoint jsonb NOT NULL,
    blob_versions jsonb NOT NULL,
    metadata jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX IF NOT EXISTS checkpoints_run_id ON {s}.checkpoints ((metadata ->> 'run_id'));
CREATE TABLE IF NOT EXISTS {s}.blobs (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    channel text NOT NULL,
    version text NOT NULL,
    type text NOT NULL,
    blob bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE IF NOT EXISTS {s}.writes (
    thread_id text NOT NULL,
    checkpoint_ns text NOT NULL DEFAULT '',
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    channel text NOT NULL,
    type text NOT NULL,
    blob bytea,
    task_path text NOT NULL DEFAULT '',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
"""

# One checkpoint with its channels' values and its pending writes, as parallel arrays (each
# aggregated in the same order). The WHERE clause and what follows it are added by the caller.
SELECT: LiteralString = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_checkpoint_id, c.checkpoint, c.metadata,
       b.channels, b.types, b.blobs, w.task_ids, w.channels, w.types, w.blobs
FROM {s}.checkpoints c
LEFT JOIN LATERAL (
    SELECT array_agg(bl.channel ORDER BY bl.channel) AS channels,
           array_agg(bl.type ORDER BY bl.channel) AS types,
           array_agg(bl.blob ORDER BY bl.channel) AS blobs
    FROM jsonb_each_text(c.blob_versions) v
    JOIN {s}.blobs bl ON bl.thread_id = c.thread_id AND bl.checkpoint_ns = c.checkpoint_ns
                     AND bl.channel = v.key AND bl.version = v.value
) b ON true
LEFT JOIN LATERAL (
    SELECT array_agg(wr.task_id ORDER BY wr.task_path, wr.task_id, wr.idx) AS task_ids,
           array_agg(wr.channel ORDER BY wr.task_path, wr.task_id, wr.idx) AS channels,
           array_agg(wr.type ORDER BY wr.task_path, wr.task_id, wr.idx) AS types,
           array_agg(wr.blob ORDER BY wr.task_path, wr.task_id, wr.idx) AS blobs
    FROM {s}.writes wr
    WHERE wr.thread_id = c.thread_id AND wr.checkpoint_ns = c.checkpoint_ns
      AND wr.checkpoint_id = c.checkpoint_id
) w ON true
"""

PUT_BLOB: LiteralString = """
INSERT INTO {s}.blobs (thread_id, checkpoint_ns, channel, version, type, blob)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
"""

PUT_CHECKPOINT: LiteralString = """
INSERT INTO {s}.checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, blob_versions, metadata)
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
SET checkpoint = EXCLUDED.checkpoint, blob_versions = EXCLUDED.blob_versions, metadata = EXCLUDED.metadata
"""

# A task's regular write is kept as first written (a repeat of the task writes the same); a
# special one (an error, an interrupt, a resume: negative indexes) is replaced by the newest.
PUT_WRITE: LiteralString = """
INSERT INTO {s}.writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob, task_path = EXCLUDED.task_path
WHERE EXCLUDED.idx < 0
"""

DELETE_THREADS: tuple[LiteralString, ...] = (
    "DELETE FROM {s}.checkpoints WHERE thread_id = ANY(%(threads)s)",
    "DELETE FROM {s}.blobs WHERE thread_id = ANY(%(threads)s)",
    "DELETE FROM {s}.writes WHERE thread_id = ANY(%(threads)s)",
)

# The threads that had a checkpoint of one of the runs (for SWEEP to clean after).
DELETE_RUNS: LiteralString = """
WITH gone AS (DELETE FROM {s}.checkpoints WHERE metadata ->> 'run_id' = ANY(%(runs)s) RETURNING thread_id)
SELECT DISTINCT thread_id FROM gone
"""

# Every checkpoint of each thread and namespace but its newest.
KEEP_LATEST: LiteralString = """
DELETE FROM {s}.checkpoints c
WHERE c.thread_id = ANY(%(threads)s)
  AND c.checkpoint_id < (SELECT max(n.checkpoint_id) FROM {s}.checkpoints n
                         WHERE n.thread_id = c.thread_id AND n.checkpoint_ns = c.checkpoint_ns)
"""

# What no checkpoint of the threads refers to any more: the writes of a deleted checkpoint, and
# each channel value that no remaining checkpoint holds.
SWEEP: tuple[LiteralString, ...] = (
    """
DELETE FROM {s}.writes w
WHERE w.thread_id = ANY(%(threads)s)
  AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints c
                  WHERE c.thread_id = w.thread_id AND c.checkpoint_ns = w.checkpoint_ns
                    AND c.checkpoint_id = w.checkpoint_id)
""",
    """
DELETE FROM {s}.blobs b
WHERE b.thread_id = ANY(%(threads)s)
  AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints c, jsonb_each_text(c.blob_versions) v
                  WHERE c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                    AND v.key = b.channel AND v.value = b.version)
""",
)

COPY_THREAD: tuple[LiteralString, ...] = (
    """
INSERT INTO {s}.checkpoints
    (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, blob_versions, metadata)
SELECT %(target)s, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, blob_versions, metadata
FROM {s}.checkpoints WHERE thread_id = %(source)s
ON CONFLICT DO NOTHING
""",
    """
INSERT INTO {s}.blobs (thread_id, checkpoint_ns, channel, version, type, blob)
SELECT %(target)s, checkpoint_ns, channel, version, type, blob FROM {s}.blobs WHERE thread_id = %(source)s
ON CONFLICT DO NOTHING
""",
    """
INSERT INTO {s}.writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path)
SELECT %(target)s, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path
FROM {s}.writes WHERE thread_id = %(source)s
ON CONFLICT DO NOTHING
""",
)
