-- The budgets family (budgets.py): reservations made before an operation, all or none, settled
-- once after it; a budget's use read.

-- name: reserve
-- One conditional statement reserves every named estimate or none: the budget rows are locked,
-- checked at their latest values, and only then updated, so two concurrent dispatches can never
-- spend the same remainder.
-- A name this operation already holds (reserved before a crash, then retried) is not reserved again.
WITH est AS (
    SELECT * FROM unnest(%(names)s::text[], %(amounts)s::numeric[]) AS e(name, amount)
    WHERE e.name NOT IN (
        SELECT name FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s)),
locked AS (
    SELECT b.name, b.limit_value, b.spent, b.reserved FROM budgets b JOIN est USING (name)
    WHERE b.budget_id = %(budget_id)s ORDER BY b.name COLLATE "C" FOR UPDATE),
over AS (
    SELECT locked.name, locked.limit_value, locked.spent, locked.reserved, est.amount
    FROM locked JOIN est USING (name)
    WHERE locked.spent + locked.reserved + est.amount > locked.limit_value),
upd AS (
    UPDATE budgets b SET reserved = b.reserved + est.amount FROM est
    WHERE b.budget_id = %(budget_id)s AND b.name = est.name AND NOT EXISTS (SELECT 1 FROM over)
    RETURNING b.name, est.amount),
ins AS (
    INSERT INTO reservations (budget_id, run_id, op_id, name, amount)
    SELECT %(budget_id)s, %(run_id)s, %(op_id)s, name, amount FROM upd)
SELECT name, limit_value, spent, reserved, amount FROM over;

-- name: settle
-- The operation's reservation is replaced by the actual use, once: the reservation rows are
-- deleted here, and a settlement that finds none of the rows it expected (a superseded worker's,
-- after the new owner settled) spends nothing. The spending writes the operation's `settlements`
-- row (0017): a settle of the same operation run again (after a lost acknowledgement, with or
-- without an expected reservation) finds it, spends nothing and says settled; a reservation it
-- finds all the same is released.
WITH gone AS (
    DELETE FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s
    RETURNING name, amount),
was AS (SELECT run_id FROM settlements WHERE run_id = %(run_id)s AND op_id = %(op_id)s),
done AS (
    INSERT INTO settlements (run_id, op_id)
    SELECT %(run_id)s, %(op_id)s
    WHERE NOT EXISTS (SELECT 1 FROM was) AND (NOT %(expected)s OR EXISTS (SELECT 1 FROM gone))
    ON CONFLICT (run_id, op_id) DO NOTHING
    RETURNING run_id),
used AS (
    SELECT a.name, a.actual FROM unnest(%(names)s::text[], %(actual)s::numeric[]) AS a(name, actual)),
u AS (
    SELECT coalesce(used.name, gone.name) AS name, coalesce(used.actual, 0) AS actual,
           coalesce(gone.amount, 0) AS reserved
    FROM used FULL JOIN gone ON used.name = gone.name),
b AS (
    UPDATE budgets b SET reserved = greatest(b.reserved - u.reserved, 0),
        spent = b.spent + CASE WHEN EXISTS (SELECT 1 FROM done) THEN u.actual ELSE 0 END
    FROM u
    WHERE b.budget_id = %(budget_id)s AND b.name = u.name
      AND (EXISTS (SELECT 1 FROM done) OR u.reserved <> 0))
SELECT run_id FROM done
UNION ALL
SELECT run_id FROM was;

-- name: reservations
SELECT name, amount FROM reservations WHERE run_id = %(run_id)s AND op_id = %(op_id)s;

-- name: budget
SELECT name, limit_value, spent, reserved FROM budgets WHERE budget_id = %(budget_id)s ORDER BY name;
