-- Every SQL statement outlast runs, by name. store/ is the only place that speaks SQL.
-- Writes about a run that a worker owns carry its fencing token: `fencing_token = %(token)s`.

-- name: schema_version
SELECT value FROM outlast_meta WHERE key = 'schema_version';

-- name: insert_run
INSERT INTO runs (id, workflow, queue, input, input_hash, program, deadline, parent_id)
VALUES (%(id)s, %(workflow)s, %(queue)s, %(input)s, %(input_hash)s, %(program)s,
        now() + make_interval(secs => %(deadline_in)s), %(parent_id)s)
ON CONFLICT (id) DO NOTHING
RETURNING *;

-- name: get_run
SELECT * FROM runs WHERE id = %(id)s;

-- name: list_runs
SELECT * FROM runs WHERE (%(state)s::text IS NULL OR state = %(state)s)
ORDER BY created_at DESC LIMIT %(limit)s;

-- name: add_event
INSERT INTO events (run_id, kind, detail) VALUES (%(run_id)s, %(kind)s, %(detail)s) RETURNING id;

-- name: events
SELECT id, run_id, at, kind, detail FROM events WHERE run_id = %(run_id)s AND id > %(after)s ORDER BY id;

-- name: claim
-- One conditional UPDATE takes the lease: a queued run, one whose lease expired, or one that
-- waits for a worker serving its program. The database clock sets the expiry.
UPDATE runs SET
    state = 'running',
    reason = NULL,
    fencing_token = fencing_token + 1,
    owner = %(worker)s,
    lease_expires_at = now() + make_interval(secs => %(ttl)s),
    attempts = attempts + 1,
    program = coalesce(program, %(programs)s::jsonb ->> workflow),
    updated_at = now()
WHERE id = %(id)s
  AND (program IS NULL OR program = %(programs)s::jsonb ->> workflow)
  AND (state = 'queued'
       OR (state = 'running' AND lease_expires_at < now())
       OR (state = 'waiting' AND reason = 'program_changed'))
RETURNING *;

-- name: renew
-- One statement renews every lease a worker holds; what it does not return was lost.
UPDATE runs SET lease_expires_at = now() + make_interval(secs => %(ttl)s)
FROM unnest(%(ids)s::text[], %(tokens)s::bigint[]) AS held(id, token)
WHERE runs.id = held.id AND runs.fencing_token = held.token AND runs.state = 'running'
RETURNING runs.id;

-- name: append
-- The run row keeps the chain's head; an entry is written only by the lease holder, in order.
WITH r AS (
    UPDATE runs SET journal_head = %(hash)s, journal_len = %(seq)s, updated_at = now()
    WHERE id = %(run_id)s AND fencing_token = %(token)s AND state = 'running'
      AND journal_len = %(seq)s - 1
    RETURNING id)
INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
SELECT id, %(seq)s, %(kind)s, %(op_id)s, %(body)s, %(hash)s FROM r
RETURNING seq;

-- name: append_unowned
-- An entry written by a person or code (a resolution) while no worker holds the run: it must
-- be waiting for exactly that, and the chain must not have moved since it was read.
WITH r AS (
    UPDATE runs SET journal_head = %(hash)s, journal_len = %(seq)s, state = 'queued',
        reason = NULL, attempts = 0, published_at = now(), updated_at = now()
    WHERE id = %(run_id)s AND state = 'waiting' AND reason = %(reason)s
      AND journal_len = %(seq)s - 1 AND journal_head = %(prev)s
    RETURNING id)
INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
SELECT id, %(seq)s, %(kind)s, %(op_id)s, %(body)s, %(hash)s FROM r
RETURNING seq;

-- name: journal
SELECT seq, kind, op_id, body, hash FROM journal WHERE run_id = %(run_id)s ORDER BY seq;

-- name: finish
WITH r AS (
    UPDATE runs SET state = %(state)s, reason = %(reason)s, result = %(result)s, error = %(error)s,
        owner = NULL, lease_expires_at = NULL, finished_at = now(), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'running'
    RETURNING id)
INSERT INTO events (run_id, kind, detail) SELECT id, %(state)s, %(detail)s FROM r
RETURNING run_id;

-- name: wait
-- A durable wait: the lease is given up and the run no longer counts as crashing its worker.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = %(reason)s, owner = NULL, lease_expires_at = NULL,
        attempts = 0, wake_at = %(wake_at)s, published_at = now(), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'running'
    RETURNING id)
INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r
RETURNING run_id;

-- name: refuse_unclaimed
-- A worker that cannot serve a run's program says so, without taking the run.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'program_changed', published_at = now(), updated_at = now()
    WHERE id = %(id)s AND state = 'queued' AND program IS DISTINCT FROM %(program)s
    RETURNING id)
INSERT INTO events (run_id, kind, detail) SELECT id, 'waiting', %(detail)s FROM r
RETURNING run_id;

-- name: release
-- Graceful hand-over: the lease ends now and the claim does not count as a crash.
WITH r AS (
    UPDATE runs SET state = 'queued', owner = NULL, lease_expires_at = NULL,
        attempts = greatest(attempts - 1, 0), published_at = now(), updated_at = now()
    WHERE id = %(id)s AND fencing_token = %(token)s AND state = 'running'
    RETURNING id, queue)
INSERT INTO events (run_id, kind, detail) SELECT id, 'handed_over', %(detail)s FROM r
RETURNING run_id;

-- name: requeue
-- An operator's resume of a waiting run; with accept_program the run adopts the serving program.
WITH r AS (
    UPDATE runs SET state = 'queued', reason = NULL, attempts = 0, published_at = now(),
        updated_at = now(),
        program = CASE WHEN %(accept_program)s THEN NULL ELSE program END
    WHERE id = %(id)s AND state = 'waiting'
    RETURNING id, queue)
INSERT INTO events (run_id, kind, detail) SELECT id, 'resumed', %(detail)s FROM r
RETURNING run_id;

-- name: due
-- The sweeper: runs that need a worker and that no stream entry may deliver. SKIP LOCKED and
-- the published_at stamp let every worker sweep at once without publishing a run twice.
WITH due AS (
    SELECT id FROM runs
    WHERE state IN ('queued', 'running', 'waiting')
      AND published_at < now() - make_interval(secs => %(after)s)
      AND (state = 'queued'
           OR (state = 'running' AND lease_expires_at < now())
           OR (state = 'waiting' AND (reason = 'program_changed' OR wake_at <= now())))
    ORDER BY published_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED)
UPDATE runs SET published_at = now() FROM due WHERE runs.id = due.id
RETURNING runs.id, runs.queue;
