-- The schedules family (schedules.py, 0010_time): schedules declared by the workers that serve
-- them, ticked by their sweepers, paused and resumed.

-- name: declare_schedule
-- A worker's declaration at its first sweep; paused and last_tick are the schedule's own and stay.
INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up, last_tick)
VALUES (%(schedule)s, %(workflow)s, %(queue)s, %(cron)s, %(tz)s, %(input)s, %(catch_up)s,
        {{now}})
ON CONFLICT (name) DO UPDATE SET workflow = EXCLUDED.workflow, queue = EXCLUDED.queue,
    cron = EXCLUDED.cron, tz = EXCLUDED.tz, input = EXCLUDED.input, catch_up = EXCLUDED.catch_up,
    updated_at = now()
WHERE (schedules.workflow, schedules.queue, schedules.cron, schedules.tz, schedules.input, schedules.catch_up)
      IS DISTINCT FROM (EXCLUDED.workflow, EXCLUDED.queue, EXCLUDED.cron, EXCLUDED.tz, EXCLUDED.input,
                        EXCLUDED.catch_up);

-- name: schedules
-- Every schedule (or those named), with the database clock the ticks are measured by.
SELECT *, {{now}} AS db_now FROM schedules
WHERE %(names)s::text[] IS NULL OR name = ANY(%(names)s)
ORDER BY name;

-- name: advance_schedule
-- The ticks up to %(tick)s are enqueued (or skipped): only from the last tick this pass read, so
-- that of two workers ticking at once one moves it on. A paused schedule does not move.
UPDATE schedules SET last_tick = %(tick)s, updated_at = now()
WHERE name = %(schedule)s AND last_tick = %(was)s AND NOT paused
RETURNING name;

-- name: pause_schedule
-- Pause or resume; a resumed schedule goes on from now: the ticks of its pause are skipped.
UPDATE schedules SET paused = %(paused)s, updated_at = now(),
    last_tick = CASE WHEN paused AND NOT %(paused)s THEN greatest(last_tick, {{now}}) ELSE last_tick END
WHERE name = %(schedule)s
RETURNING *;
