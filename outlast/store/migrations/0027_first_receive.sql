-- compat: expand
-- Version 27: a message's receive among the waits of `run.first`. The channels a run waiting on
-- the first of several waits receives on (`waits_channels`), and the send that wakes such a run
-- when its message is on one of them (`outlast_send_message` replaced, same signature and meaning
-- for every other run). A column older code never reads, and a function replaced.

-- The channels of the receives among a `run.first`'s waits (reason 'first'); NULL otherwise.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS waits_channels text[];

-- One send (as 0024's), which also wakes a run waiting on the first of several waits when one of
-- them is a receive on this channel (a timer among them may be due later).
CREATE OR REPLACE FUNCTION outlast_send_message(
    p_run_id text, p_channel text, p_payload jsonb, p_message_id text,
    p_max_bytes integer, p_max_waiting integer, p_via text)
RETURNS TABLE (message_id text, seq bigint, sent_at timestamptz, duplicate boolean, queue text,
               refusal text, refused text)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    r record;
    m record;
    n bigint;
    at timestamptz;
    woke boolean;
    what text := format('run %L, channel %L', p_run_id, p_channel);
BEGIN
    SELECT runs.id, runs.state, runs.reason, runs.waits_for, runs.wake_at, runs.messages_waiting,
           runs.queue AS q, runs.waits_channels INTO r
    FROM runs WHERE runs.id = p_run_id FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'unknown',
            format('%s: no such run; nothing stored', what);
        RETURN;
    END IF;
    SELECT * INTO m FROM messages WHERE messages.run_id = p_run_id AND messages.message_id = p_message_id;
    IF FOUND THEN  -- sent again (a retry, a repeated delivery): the first send's receipt
        RETURN QUERY SELECT m.message_id, m.seq, m.created_at, true, NULL::text, NULL::text, NULL::text;
        RETURN;
    END IF;
    IF outlast_final(r.state) THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'final',
            format('%s: the run is %s and takes no more messages; nothing stored', what, r.state);
        RETURN;
    END IF;
    IF p_max_bytes IS NOT NULL AND octet_length(p_payload::text) > p_max_bytes THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'too_large',
            format('%s: the payload is over %s bytes (OUTLAST_MAX_PAYLOAD); nothing stored', what, p_max_bytes);
        RETURN;
    END IF;
    IF p_max_waiting IS NOT NULL AND r.messages_waiting >= p_max_waiting THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'full',
            format('%s: %s messages already wait untaken (OUTLAST_MAX_INBOX); nothing stored', what,
                   r.messages_waiting);
        RETURN;
    END IF;
    at := (SELECT o.at FROM outlast_now() o);
    woke := ((r.state = 'waiting' AND r.reason = 'message' AND r.waits_for = p_channel)
             OR (r.state IN ('waiting', 'awaiting_approval') AND r.reason = 'first'
                 AND p_channel = ANY (r.waits_channels)))
            AND (r.wake_at IS NULL OR r.wake_at > at);
    UPDATE runs SET messages_sent = runs.messages_sent + 1, messages_waiting = runs.messages_waiting + 1,
        wake_at = CASE WHEN woke THEN at ELSE runs.wake_at END
    WHERE runs.id = p_run_id RETURNING runs.messages_sent INTO n;
    INSERT INTO messages (run_id, message_id, channel, seq, payload, via)
    VALUES (p_run_id, p_message_id, p_channel, n, p_payload, p_via)
    RETURNING messages.created_at INTO at;
    RETURN QUERY SELECT p_message_id, n, at, false, CASE WHEN woke THEN r.q END, NULL::text, NULL::text;
END $$;
