-- The journal family (journal.py): a run's hash-chained entries. `append` is the one way in for
-- the lease holder (fenced), `append_unowned` for a resolution while no worker holds the run; the run
-- row keeps the chain's head.

-- name: append
-- The run row keeps the chain's head; entries are written only by the lease holder, in order. One
-- statement writes one entry, or several (results held for a moment, then the entry that carries
-- them): all of them or none, numbered in order up to %(seq)s. %(seq)s and %(hash)s are the last
-- entry's. %(bytes)s: the entries' bodies in bytes, counted by the writer (`journal_bytes`, 0032);
-- the run's count after it, and whether its size warning is written, are returned (`size.sql`).
-- Run again after a commit whose acknowledgement was lost, it finds its own last entry (same seq,
-- same hash, token still held) and says so instead of failing.
WITH r AS (
    UPDATE runs SET {{append_head}}
    WHERE {{append_fence}}
    RETURNING id, cancel_requested, journal_bytes, size_warned_at),
{{append_entries}};

-- part: append_head
-- What a fenced append sets on the run row (`append`, and the message family's `take`): the
-- chain's new head, and the bytes its entries add (`journal_bytes`). A new entry is progress: the
-- claims counted towards max_attempts start again from this one.
journal_head = %(hash)s, journal_len = %(seq)s, attempts = 1, updated_at = now(),
    journal_bytes = journal_bytes + %(bytes)s;

-- part: append_fence
-- The run row a fenced append moves: held under the lease holder's token, its chain where the
-- entries' first one follows.
id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND journal_len = %(seq)s - cardinality(%(kinds)s::text[]);

-- part: append_entries
-- A fenced append's entries, after the CTE `r` that moved the run row (RETURNING id,
-- cancel_requested, journal_bytes, size_warned_at), and its answer: their numbers, whether a
-- cancellation was asked for, the run's bytes and whether its size warning is written; or, run
-- again after a commit whose acknowledgement was lost, its own last entry.
ins AS (
    INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
    SELECT r.id, %(seq)s - cardinality(%(kinds)s::text[]) + e.n, e.kind, e.op_id, e.body, e.hash
    FROM r, unnest(%(kinds)s::text[], %(op_ids)s::text[], %(bodies)s::text[], %(hashes)s::text[])
         WITH ORDINALITY AS e(kind, op_id, body, hash, n)
    RETURNING seq)
SELECT ins.seq, r.cancel_requested, r.journal_bytes, r.size_warned_at IS NOT NULL AS size_warned FROM ins, r
UNION ALL
SELECT j.seq, runs.cancel_requested, runs.journal_bytes, runs.size_warned_at IS NOT NULL
FROM journal j JOIN runs ON runs.id = j.run_id
WHERE j.run_id = %(run_id)s AND j.seq = %(seq)s AND j.hash = %(hash)s
  AND runs.fencing_token = %(token)s;

-- name: append_unowned
-- An entry written by a person or code (a resolution) while no worker holds the run: it must
-- be waiting for exactly that, and the chain must not have moved since it was read. Run again
-- after a commit whose acknowledgement was lost, it finds its own entry (same seq, same hash:
-- chained to the head it was read after, with its own body) and says so instead of failing.
WITH r AS (
    UPDATE runs SET journal_head = %(hash)s, journal_len = %(seq)s, state = 'queued',
        reason = NULL, attempts = 0, published_at = {{now}}, updated_at = now(),
        journal_bytes = journal_bytes + %(bytes)s
    WHERE id = %(run_id)s AND state = 'waiting' AND reason = %(reason)s
      AND journal_len = %(seq)s - 1 AND journal_head = %(prev)s
    RETURNING id, cancel_requested),
ins AS (
    INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
    SELECT id, %(seq)s, %(kind)s, %(op_id)s, %(body)s, %(hash)s FROM r
    RETURNING seq)
SELECT seq, (SELECT cancel_requested FROM r) AS cancel_requested FROM ins
UNION ALL
SELECT j.seq, runs.cancel_requested FROM journal j JOIN runs ON runs.id = j.run_id
WHERE j.run_id = %(run_id)s AND j.seq = %(seq)s AND j.hash = %(hash)s;

-- name: journal
SELECT seq, kind, op_id, body, hash FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: journal_to_replay
-- The journal as a resume replays it: a capture's body is not read (replay needs none), only its
-- opening, which says it is a capture (a row whose kind was changed to one is read whole, and its
-- chain then fails); its link in the chain is checked by the next entry's, from its stored hash.
SELECT seq, kind, op_id, hash,
    CASE WHEN kind = 'capture'
          AND left(body, 160) ~ '^\{("base":"[0-9a-f]{64}",)?("bytes":[0-9]+,)?"kind":"capture",'
         THEN NULL ELSE body END AS body
FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: captures
-- The captures a run journaled up to %(upto)s, read at its first capture after a resume.
SELECT seq, kind, op_id, body, hash FROM journal
WHERE run_id = %(run_id)s AND kind = 'capture' AND seq <= %(upto)s ORDER BY seq;

-- name: journal_times
SELECT seq, created_at FROM journal WHERE run_id = %(run_id)s ORDER BY seq;
