"""This module declares the name of every log line outlast writes, and what it means.

A log line's event is one of these constant, dotted names; its details ride as keys
(``log.info("run.finished", state="succeeded", reason=None)``), so that a line can be found
and counted by its name. ``tests/unit/test_log_events.py`` fails on a logging call whose event
is anything else (an f-string, a variable, a name missing here), and the docs' table of log
events is written from ``EVENTS``.
"""

from __future__ import annotations

EVENTS: dict[str, str] = {
    # A worker's life
    "worker.started": "A worker serves its queues (`queues`, `concurrency`, `lease_ttl`, `event_loop`).",
    "worker.stopping": "A worker got a `signal`: it stops taking work and hands over within `grace` seconds.",
    "worker.draining": "A stopping worker waits up to `grace` seconds for its `runs` in flight.",
    "worker.stopped": "A worker stopped.",
    "worker.stop_forced": (
        "A stopping worker's hand-over outlasted its `grace` plus a few seconds (Postgres or Redis "
        "out of reach): it exits anyway, leaving `runs` to their leases."
    ),
    "worker.close_abandoned": (
        "A stopped worker's connections did not close `within` seconds (a server out of reach): "
        "the process exits anyway, leaving them to the OS."
    ),
    "library.log": (
        "A library's own log record (`logger`, `message`, `exception`), such as psycopg_pool's "
        "failed connection attempts."
    ),
    "worker.step_failing": "A background `step` failed (`error`); it is tried again.",
    "pool.stopping": "The process pool got a `signal`: it stops its worker processes.",
    "pool.process_killed": (
        "A stopping pool's worker process `pid` outlived its bound (`after` seconds: grace plus "
        "the stop's and the closes' own): killed (SIGKILL), its runs left to their leases."
    ),
    "pool.process_exited": "A worker process `pid` died (`how`; `served`: whether it had served); "
    "another starts in `restart_in` seconds.",
    # A run
    "run.resumed": "A run resumed: `entries` journaled entries re-derived with no effect.",
    "run.finished": "A run ended in its final `state` (`reason`).",
    "run.carried_forward": "A run carried forward: its `generation` starts, the one before ended "
    "with `entries` journaled entries.",
    "run.waiting": "A run waits durably (`reason`, `message`).",
    "run.size_warning": (
        "A run has journaled `bytes`, past `threshold` (OUTLAST_RUN_SIZE_WARN): said once per run, "
        "with its 'size_warning' event."
    ),
    "linger.polling": "A worker's lingering receives look every `every` seconds, with no LISTEN (`why`).",
    "run.throttled": "A run waits in place for room (`waits_for`: a rate window or a slot).",
    "run.parked": "A run gave its worker back to wait for room (`reason`, `message`).",
    "run.fenced": "A run's write was refused: another worker holds its lease now (`error`).",
    "run.partial_handler_failed": (
        "A run's partial handler raised (`error`); the run ends `state` with nothing partial."
    ),
    "run.not_handed_over": "A stopping worker could not release a run (`error`): its lease runs out instead.",
    "run.handed_over": "A stopping worker released a run's lease and published it for another worker.",
    "run.acknowledged": "A run's stream entry was acknowledged (`outcome`).",
    "run.waiting_for_lease": (
        "A run's `owner` went silent (a heartbeat overdue by half a lease) while it held the run: the "
        "run waits `seconds` for that lease to expire, then a live worker takes it over; said once "
        "per run by each worker's sweeper."
    ),
    "run.left_for_later": (
        "A run could not be served (`error`: a server unavailable); its entry is reclaimed later."
    ),
    "live.dropped": (
        "A run's live `chunks` could not reach Redis (`error`): they are lost (live output is at most once)."
    ),
    "run.serve_failed": "An unexpected error serving a run's entry (traceback follows).",
    "run.moved": (
        "A run parked on another program (`was`: program_changed or workflow_error; `program`) was "
        "resumed on the program this worker serves (`to`): it goes on where replay agrees with its journal."
    ),
    "run.program_changed": (
        "A run's program changed since it started and no worker serves it (`message`: the way out)."
    ),
    "run.unknown_workflow": (
        "A run of a `workflow` this worker's app does not know, and no live worker knows: it stays "
        "queued (published again) until a worker that knows it starts."
    ),
    "worker.callbacks_relative": (
        "At start: `workflows` make callbacks and OUTLAST_CALLBACK_URL is unset: their URLs are the "
        "dashboard's relative path (/callbacks/...), which an outside service cannot reach as given."
    ),
    "worker.unknown_workflows": (
        "At start: unfinished runs on this worker's queues are of `workflows` its app does not know "
        "(another app on the same queue: route each app to its own queue)."
    ),
    "run.bug_parked": (
        "The workflow's code raised an exception it did not declare (`error`: type, message, "
        "traceback): the run waits, reason workflow_error, until a fix is deployed and it is resumed."
    ),
    "run.paused": (
        "An operator's pause (`outlast pause`) stopped the run at its claim or at its next crossing: it "
        "waits, reason paused, holding no worker (`state` queued: the pause was lifted meanwhile)."
    ),
    "run.timed_out": "The sweeper ended a run whose deadline passed while nothing ran.",
    "lease.lost": "A run's lease was lost: the run is abandoned to its new owner.",
    "approval.awaited": "A run waits for a person's decision on `operation_id` (`action`).",
    "request.awaited": "A run waits for the answer to its request `operation_id` (`name`).",
    "message.set_aside": (
        "A run set aside message `message_id` on `channel`: its channel's type refuses the payload "
        "(stored unchecked, by `outlast_send`). It is kept with why; the run waits for another."
    ),
    # An operation (a tool call)
    "operation.dispatched": (
        "An operation's tool is called (`args`, secrets sealed; only with log payloads on)."
    ),
    "operation.returned": "An operation's tool returned (`result` as journaled; only with log payloads on).",
    "tool.raised": "A tool raised (`error`, redacted).",
    "tool.rate_limited": "A tool said it was rate limited; tried again, same key, in `retry_after` seconds.",
    "operation.unresolved": (
        "On resume: an intention without result (`tool`, `operation_id`, `idempotency_key`), to resolve."
    ),
    "operation.in_doubt": (
        "An operation's effect is unknown and it is not executed again (`why`); a gap for a person."
    ),
    "operation.abandoned": (
        "A read's or an idempotent tool's call given up on at its run's cancellation (`why`): no result,"
        " never dispatched again by the run."
    ),
    "gap.resolved": (
        "An intention without result was resolved (`how`: redone read, same key, or a reconciler's answer)."
    ),
    # Background work
    "sweeper.republished": "The sweeper re-published `count` due runs (`runs`: the first 20).",
    "sweeper.turns_published": "The sweeper published `count` held runs in their tenant's turn.",
    "sweeper.pruned": "Retention deleted what finished `before` (counts per kind).",
    "charts.caught_up": (
        "The charts' rollup counted the runs of `minutes` minutes at once, from `since` to `until`: "
        "minutes no worker rolled up (all stopped, Postgres away) caught up."
    ),
    "charts.queues_not_sampled": "The charts' rollup sampled no queue this minute: Redis is away (`error`).",
    "schedule.enqueued": (
        "A schedule enqueued `count` runs (`skipped_to`: ticks up to it missed and skipped)."
    ),
    "schedule.broken": "A schedule cannot tick on this host (`error`); fix its declaration.",
    "redis.data_lost": "Redis lost its data: every run Postgres says is due is re-published.",
    "queue.read_failing": "Reading the queue failed (`error`); retrying.",
    "entry.dead_lettered": "A stream entry that cannot be served was dead-lettered (`entry`, `reason`).",
    "ack.failing": "Acknowledging entries failed (`error`); retrying.",
    "ack.recovered": "Acknowledging entries works again.",
    "ack.given_up": "Entries of `runs` left unacknowledged; they will be delivered again.",
    "ack.failed": (
        "Acknowledging `entries` entries failed unexpectedly (traceback follows); they will be "
        "delivered again."
    ),
    "store.writes_failing": "Writes to Postgres failed (`error`); retrying for up to `retry_for` seconds.",
    "store.writes_recovered": "Writes to Postgres go through again.",
    "payloads.unavailable": (
        "The object store of payloads (`OUTLAST_PAYLOAD_STORE`, at `url`) does not answer (`error`): "
        "runs that store or read a payload are left to a later claim, none fails. Once an episode."
    ),
    "payloads.available": "The object store of payloads answers again (`url`).",
    "sweeper.payloads_swept": (
        "The sweeper deleted `count` payloads no journal entry refers to past `OUTLAST_PAYLOAD_GRACE` "
        "(a worker died before journaling it), or whose run was pruned."
    ),
    "store.slow": (
        "A Postgres round trip (a lease renewal, a heartbeat record) took `round_trip_ms`, over "
        "`threshold_ms` (`OUTLAST_SLOW_ROUND_TRIP`, at most a tenth of the lease TTL); `risks` "
        "says what it puts at risk. Once an episode."
    ),
    "store.fast_again": "Postgres round trips are back under the `store.slow` threshold (`round_trip_ms`).",
    "store.writer_lane_refused": (
        "The writer could not open one more connection (`error`): it keeps `lanes` transactions in"
        " flight instead of `OUTLAST_WRITER_IN_FLIGHT`."
    ),
    # The schema (outlast migrate, and every process's check at start)
    "schema.lock_wait": (
        "A statement of `migration` waited a few seconds for a lock (`error`: a transaction holds it) "
        "and gave way, so that the writers queued behind it go on; it is tried again in `retry_in` "
        "seconds (`attempt` of `attempts`)."
    ),
    "schema.invalid_index_dropped": (
        "An index of `migration` left invalid by a concurrent build that gave way or died (`index`) "
        "was dropped, to be built again."
    ),
    "schema.newer_compatible": (
        "The schema is version `found`, newer than this outlast knows (`knows`), and declared "
        "compatible with it (`oldest_code`): a rolling upgrade under way."
    ),
    # The dashboard and the operators' acts
    "users.unreadable": "The dashboard's users file cannot be read (`error`): the last good one stays.",
    "users.gone": "The dashboard's users file (`path`) is gone: nobody is a user, every session ends.",
    "session.forged": "A session row the dashboard did not seal, or one altered since, was refused and "
    "deleted (`principal`).",
    "session.unsealed": "A session from before sessions were sealed was ended (`principal`): sign in again.",
    "dashboard.unavailable": "The dashboard could not answer a caller not signed in (`error`: only here).",
    "dashboard.failed": "A request failed inside the dashboard (`path`, with the traceback): a 500 was sent.",
    "sessions.ended": "The dashboard ended the sessions of `users` removed or given a new token.",
    "schedule.paused": "An operator paused (`paused` true) or resumed a schedule; who, beside.",
}
