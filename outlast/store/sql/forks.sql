-- The forks family (forks.py): a run started from a prefix of another's journal.

-- name: fork_run
-- A fork of run %(original)s: a new queued run of the same workflow, input, queue, tenant, priority,
-- deadline and budget (shared), referring to the original (parent_id), with no program yet (the
-- first worker's: the code deployed now), and the original's journal up to the operation forked
-- from, entries copied as they are (their bodies, keys and chain hashes). The run, its journal and
-- both runs' events in one statement: no worker can take the fork before its journal is there.
WITH o AS (SELECT * FROM runs WHERE id = %(original)s),
r AS (
    INSERT INTO runs (id, workflow, queue, input, input_hash, program, deadline, parent_id, budget_id,
                      trace_context, priority, tenant, journal_head, journal_len)
    SELECT %(id)s, o.workflow, o.queue, o.input, o.input_hash, NULL, o.deadline, o.id, o.budget_id,
           %(trace_context)s, o.priority, o.tenant, %(head)s, %(len)s
    FROM o
    ON CONFLICT (id) DO NOTHING
    RETURNING *),
j AS (
    INSERT INTO journal (run_id, seq, kind, op_id, body, hash)
    SELECT r.id, x.seq, x.kind, x.op_id, x.body, x.hash
    FROM r, unnest(%(seqs)s::int[], %(kinds)s::text[], %(ops)s::text[], %(bodies)s::text[], %(hashes)s::text[])
         AS x(seq, kind, op_id, body, hash)),
e AS (
    SELECT outlast_event(r.id, 'forked_from', %(detail)s || jsonb_build_object('run', r.parent_id)),
           outlast_event(r.parent_id, 'forked', %(detail)s || jsonb_build_object('as', r.id))
    FROM r)
SELECT r.* FROM r, e;
