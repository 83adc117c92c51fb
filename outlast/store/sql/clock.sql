-- The schema's clock as the statements of every family read it: the database clock plus the
-- schema's offset (0018_clock's outlast_now(), which tests move), a scalar subquery that Postgres
-- evaluates once per statement. Taken in where a statement says {{now}}. It is a part, not a
-- function: a function returning the value does not inline (its body reads a table), and would be
-- read row by row.

-- part: now
(SELECT at FROM outlast_now())
