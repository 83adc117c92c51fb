-- The flow family (flow.py, 0011_flow): concurrency slots taken and freed under a run's token, and
-- a run parked until there is a slot or room in a rate window.

-- name: acquire_slot
-- One conditional statement takes a free slot of a capped key for the lease holder (its fencing
-- token current): the slot it already holds (a resumed run, a newer token), else one free or
-- expired slot picked at random. A slot another holder took meanwhile fails the insert's
-- condition: nothing is returned and the caller tries again later.
WITH r AS (
    SELECT id FROM runs WHERE id = %(run_id)s
      AND outlast_held_by(fencing_token, state, %(token)s)),
mine AS (
    UPDATE slots SET token = %(token)s, expires_at = {{now}} + make_interval(secs => %(ttl)s)
    FROM r WHERE slots.key = %(key)s AND slots.run_id = r.id AND slots.holder = %(holder)s
    RETURNING slots.slot),
free AS (
    SELECT n FROM r, generate_series(0, %(cap)s - 1) AS n
    WHERE NOT EXISTS (SELECT 1 FROM mine)
      AND NOT EXISTS (SELECT 1 FROM slots s WHERE s.key = %(key)s AND s.slot = n AND s.expires_at >= {{now}})
    ORDER BY random() LIMIT 1),
ins AS (
    INSERT INTO slots (key, slot, run_id, holder, token, expires_at)
    SELECT %(key)s, n, %(run_id)s, %(holder)s, %(token)s, {{now}} + make_interval(secs => %(ttl)s) FROM free
    ON CONFLICT (key, slot) DO UPDATE SET run_id = excluded.run_id, holder = excluded.holder,
        token = excluded.token, expires_at = excluded.expires_at
    WHERE slots.expires_at < {{now}}
    RETURNING slot)
SELECT slot FROM mine UNION ALL SELECT slot FROM ins;

-- name: release_slots
-- The slots a run holds under its token: all of them, or one holder's (an operation's). For
-- each key freed, the run parked for it that was due first is due at once (SKIP LOCKED: never
-- waits).
WITH gone AS (
    DELETE FROM slots WHERE run_id = %(run_id)s AND token = %(token)s
      AND (%(holder)s::text IS NULL OR holder = %(holder)s)
    RETURNING key),
woken AS (
    UPDATE runs SET wake_at = {{now}} FROM (
        SELECT w.id FROM (SELECT DISTINCT key FROM gone) g CROSS JOIN LATERAL (
            SELECT id FROM runs
            WHERE state = 'waiting' AND reason = 'concurrency_slot' AND slot_key = g.key
              AND wake_at > {{now}}
            ORDER BY wake_at LIMIT 1 FOR UPDATE SKIP LOCKED) w) first
    WHERE runs.id = first.id
    RETURNING runs.id)
SELECT key FROM gone;

-- name: park
-- Like `wait`, for a run that waits for a slot (naming its key) or for room in a rate window.
-- (The UNION's second half never sees the first's update: it reads the statement's snapshot.)
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = %(reason)s, slot_key = %(slot_key)s, owner = NULL,
        lease_expires_at = NULL, attempts = 0, wake_at = %(wake_at)s, published_at = {{now}},
        updated_at = now()
    WHERE id = %(id)s AND outlast_held_by(fencing_token, state, %(token)s)
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
UNION ALL  -- run again after a lost acknowledgement: already parked under this token
SELECT id FROM outlast_redone(%(id)s, %(token)s, 'waiting', %(reason)s);
