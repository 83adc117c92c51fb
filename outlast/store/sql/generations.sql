-- The generations family (generations.py): a run carried forward. `carry` ends the current
-- generation of a run's journal and starts the next (fenced); the earlier generations are read
-- back, and verified, from `generations` and `journal_past`.

-- name: carry
-- One statement, all or none: the run row starts generation %(generation)s + 1 with the input it
-- carries, an empty journal and its operations numbered on from %(next_base)s; the row of the
-- ending generation is written and its entries moved from `journal` to `journal_past`. Only on the
-- journal the worker chained (%(journal_len)s entries, as `finish`): the results it held are written
-- in the same shared commit, just before. Messages, state, events, approvals and budgets are the
-- run's, not a generation's: untouched. Run again after a lost acknowledgement, it finds the run in
-- the next generation under its token.
WITH r AS (
    UPDATE runs SET generation = generation + 1, op_base = %(next_base)s, carried = %(next_input)s,
        journal_head = '', journal_len = 0, attempts = 1, updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND generation = %(generation)s AND journal_len = %(journal_len)s
    RETURNING id),
g AS (
    INSERT INTO generations (run_id, generation, input, op_base, journal_head, journal_len)
    SELECT id, %(generation)s, %(input)s, %(op_base)s, %(journal_head)s, %(journal_len)s FROM r),
moved AS (
    DELETE FROM journal WHERE run_id = %(id)s AND EXISTS (SELECT 1 FROM r)
    RETURNING run_id, seq, kind, op_id, body, hash, created_at),
kept AS (
    INSERT INTO journal_past (run_id, generation, seq, kind, op_id, body, hash, created_at)
    SELECT run_id, %(generation)s, seq, kind, op_id, body, hash, created_at FROM moved)
SELECT id AS run_id FROM r, outlast_event(id, 'carried_forward', %(detail)s)
UNION ALL
SELECT id FROM runs WHERE id = %(id)s AND fencing_token = %(token)s AND generation = %(generation)s + 1;

-- name: generations
-- The ended generations of a run, oldest first.
SELECT generation, input, op_base, journal_head, journal_len, carried_at
FROM generations WHERE run_id = %(run_id)s ORDER BY generation;

-- name: journal_past
-- The entries of one ended generation, in order.
SELECT seq, kind, op_id, body, hash FROM journal_past
WHERE run_id = %(run_id)s AND generation = %(generation)s ORDER BY seq;
