-- The messages family (messages.py): what a send reads of its run, a message sent into a run
-- (`outlast_send_message`, 0024, 0027, 0028, 0029), the lease holder's look at its inbox, the take
-- (the journal entry that records a message and the message marked taken, in one fenced
-- statement), a message the run cannot take set aside (0029), the wait on a channel (committed only
-- if no message was accepted since the look), and the run's messages read.

-- name: send_to
-- What a send needs to know of the run first, in one read by its key: its workflow, its priority
-- (to publish it if the send wakes it), its creation time (the incarnation a callback's token
-- binds), the JSON schema of the channel its declaration gives
-- (0028's `outlast_declared`; NULL: undeclared, or the workflow declares no channels), and
-- `unheard`: its workflow declares no channels and the run never took a message on this one (a
-- send that wakes nothing then warns: maybe no one will ever receive on it).
SELECT r.workflow, r.priority, r.created_at, d.channels -> %(channel)s AS schema,
       d.channels IS NULL AND NOT EXISTS (
           SELECT 1 FROM messages m
           WHERE m.run_id = r.id AND m.channel = %(channel)s AND m.taken_seq IS NOT NULL) AS unheard
FROM runs r LEFT JOIN LATERAL outlast_declared(r.workflow, r.program) d ON true
WHERE r.id = %(run_id)s;

-- name: send
-- One send: the run row locked, a repeated id answered with the first receipt, a refusal said in
-- one line, else the message stored and the run woken if it waits on this channel (0024); bounded
-- per channel and per run (0029). A run someone watches (a worker's receive that lingers, see
-- worker/linger.py) is notified on its channel (%(notify)s), as its events notify it: a run nobody
-- watches pays one index look-up.
SELECT s.*, (SELECT count(*) FROM (
        SELECT pg_notify(%(notify)s, '') FROM watchers
        WHERE watchers.run_id = %(run_id)s AND s.seq IS NOT NULL AND NOT s.duplicate LIMIT 1) n
    ) AS notified
FROM outlast_send_message(%(run_id)s, %(channel)s, %(payload)s, %(message_id)s,
                          %(max_bytes)s, %(max_waiting)s, %(max_waiting_run)s, %(via)s) s;

-- name: message_channel
-- The channel a message id of the run was sent on (a send answered as a duplicate: the same id on
-- another channel is refused).
SELECT channel FROM messages WHERE run_id = %(run_id)s AND message_id = %(message_id)s;

-- name: inbox
-- The lease holder's look at the channel: the oldest untaken message (if any), and the run's count
-- of messages accepted, which its wait must still find (`await_message`); `held`: the run is still
-- held under this token; `cancel_requested`: a cancellation was asked for meanwhile.
SELECT r.messages_sent, outlast_held_by(r.fencing_token, r.state, %(token)s) AS held, r.cancel_requested,
       m.message_id, m.seq, m.payload, m.created_at
FROM runs r
LEFT JOIN LATERAL (
    SELECT message_id, seq, payload, created_at FROM messages
    WHERE run_id = r.id AND channel = %(channel)s AND taken_seq IS NULL AND set_aside IS NULL
    ORDER BY seq LIMIT 1) m ON true
WHERE r.id = %(run_id)s;

-- name: take
-- The take: the journal entry that records the message (and the held entries before it), the
-- message marked taken by it, and the run's count of untaken messages, all or none, as the lease
-- holder: the journal family's fenced append (its parts, journal.sql), with the message. Run again
-- after a commit whose acknowledgement was lost, it finds its own entry and says so.
WITH r AS (
    UPDATE runs SET {{append_head}}, messages_waiting = messages_waiting - 1
    WHERE {{append_fence}}
      AND EXISTS (SELECT 1 FROM messages WHERE run_id = %(run_id)s AND message_id = %(message_id)s
                  AND taken_seq IS NULL)
    RETURNING id, cancel_requested, journal_bytes, size_warned_at),
m AS (
    UPDATE messages SET taken_seq = %(seq)s, taken_op = %(op_id)s, taken_at = now()
    FROM r WHERE messages.run_id = r.id AND messages.message_id = %(message_id)s
      AND messages.taken_seq IS NULL),
{{append_entries}};

-- name: set_aside
-- A message the run cannot take (its channel's type refuses the payload): kept, marked with why,
-- and out of the inbox (no longer counted against OUTLAST_MAX_INBOX), as the lease holder. Run
-- again after a lost acknowledgement, or by a worker that no longer holds the run, it changes
-- nothing (the look that follows says which).
WITH r AS (
    UPDATE runs SET messages_waiting = messages_waiting - 1, updated_at = now()
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND EXISTS (SELECT 1 FROM messages WHERE run_id = %(run_id)s AND message_id = %(message_id)s
                  AND taken_seq IS NULL AND set_aside IS NULL)
    RETURNING id)
UPDATE messages SET set_aside = %(reason)s, set_aside_at = now()
FROM r WHERE messages.run_id = r.id AND messages.message_id = %(message_id)s
RETURNING messages.message_id;

-- name: await_message
-- A durable wait on a channel: the lease is given up, the channel recorded (`waits_for`), and the
-- timeout, if any, is the wake-up time. Committed only if the run's count of accepted messages is
-- still the one the worker looked at: a send locks the run row too, so either it committed first
-- (this finds the count moved, and the worker looks again) or it finds the run waiting and wakes
-- it. Run again after a lost acknowledgement, it finds the run waiting under its token.
WITH r AS (
    UPDATE runs SET state = 'waiting', reason = 'message', waits_for = %(channel)s, owner = NULL,
        lease_expires_at = NULL, attempts = 0, wake_at = %(wake_at)s,
        published_at = {{now}}, updated_at = now()
    WHERE id = %(run_id)s AND outlast_held_by(fencing_token, state, %(token)s)
      AND messages_sent = %(seen)s
    RETURNING id)
SELECT id AS run_id FROM r, outlast_event(id, 'waiting', %(detail)s)
UNION ALL
SELECT id FROM outlast_redone(%(run_id)s, %(token)s, 'waiting', 'message') WHERE waits_for = %(channel)s;

-- name: messages
-- A run's messages, in the order they were accepted: the untaken ones, which operation took the
-- others, and why the run set aside those it could not take.
SELECT message_id, channel, seq, payload, via, created_at, taken_seq, taken_op, taken_at,
       set_aside, set_aside_at
FROM messages WHERE run_id = %(run_id)s ORDER BY seq;
