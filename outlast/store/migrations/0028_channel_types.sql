-- compat: expand
-- Version 28: typed channels for every sender. Each worker publishes the channels its workflows
-- declare (`workflow_channels`, a JSON schema per channel), so a sender without the app (a client,
-- the CLI, a callback, the HTTP API, `outlast_send`) is refused an unknown channel, and the
-- client checks the payload against the channel's schema, before anything is stored. A new table,
-- a new function, and `outlast_send_message` replaced with the same signature (a new refusal,
-- `unknown_channel`, for runs whose workflow a worker of this code declared).

-- The channels of a workflow's program (`runs.program`: its version and a fingerprint of its
-- source, decorator included), upserted by every worker of this code at its start: `channels` is
-- {channel: JSON schema} (NULL: the workflow declares none, it takes any channel). Kept after the
-- workers stop: a run keeps the program that admitted it.
CREATE TABLE workflow_channels (
    workflow     text NOT NULL,
    program      text NOT NULL,
    channels     jsonb,
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow, program)
);

-- The declaration that governs a run's messages: its program's; for a run no worker has taken yet
-- (no program: admitted by a client without the app), the one published last for its workflow,
-- the program a worker of the newest deploy will give it. None: no worker of this code published
-- the workflow; any channel is taken, and the payload is validated at the take.
CREATE FUNCTION outlast_declared(p_workflow text, p_program text)
RETURNS TABLE (channels jsonb)
LANGUAGE sql STABLE AS $$
    SELECT d.channels FROM workflow_channels d
    WHERE d.workflow = p_workflow AND (p_program IS NULL OR d.program = p_program)
    ORDER BY d.published_at DESC LIMIT 1
$$;

-- One send (as 0027's), which also refuses a channel the run's workflow does not declare.
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
           runs.queue AS q, runs.waits_channels, d.channels INTO r
    FROM runs LEFT JOIN LATERAL outlast_declared(runs.workflow, runs.program) d ON true
    WHERE runs.id = p_run_id FOR NO KEY UPDATE OF runs;
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
    IF r.channels IS NOT NULL AND NOT r.channels ? p_channel THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'unknown_channel',
            format('%s: unknown channel (its workflow declares: %s); nothing stored', what,
                   coalesce((SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(r.channels) k), 'none'));
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
