-- compat: expand
-- Version 29: an outbox a least-privileged role may call, and an inbox bounded per channel. The
-- limits of a send by SQL kept in the schema (`send_limits`, written by the workers from their
-- settings), the send that bounds each channel's untaken messages and the run's as a whole
-- (`outlast_send_message`, a new overload: 0028's is now a wrapper with its old meaning), and
-- `outlast_send` a SECURITY DEFINER function with a fixed search_path, the only one a sender's role
-- needs (docs/secrets.md); the inner send callable by no one but the schema's owner. And a message
-- the run cannot take is set aside, not fatal: a payload stored without its channel's type checked
-- (`outlast_send` checks only the channel) that the run's program then refuses is kept, marked with
-- why (`set_aside`), and left out of the inbox and its bounds; the run goes on waiting.

-- Why the run could not take the message (its channel's type refused the payload), and when it
-- was set aside; NULL: not set aside (in the inbox while `taken_seq` is NULL too).
ALTER TABLE messages ADD COLUMN IF NOT EXISTS set_aside text;
ALTER TABLE messages ADD COLUMN IF NOT EXISTS set_aside_at timestamptz;

-- The limits `outlast_send` applies: the workers' OUTLAST_MAX_PAYLOAD, OUTLAST_MAX_INBOX and
-- OUTLAST_MAX_INBOX_RUN, written by each worker of this code at its start (the last start wins),
-- settings.py's defaults until then. One row; never read from the caller's session.
CREATE TABLE send_limits (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    max_payload   integer NOT NULL,
    max_inbox     integer NOT NULL,
    max_inbox_run integer NOT NULL,
    published_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO send_limits (max_payload, max_inbox, max_inbox_run) VALUES (1048576, 1000, 4000);

-- One send (as 0028's), bounded twice: `p_max_waiting` untaken messages on this channel (a channel
-- that fills, say a callback's, leaves the others open), `p_max_waiting_run` in the whole run.
CREATE FUNCTION outlast_send_message(
    p_run_id text, p_channel text, p_payload jsonb, p_message_id text,
    p_max_bytes integer, p_max_waiting integer, p_max_waiting_run integer, p_via text)
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
    IF p_max_waiting IS NOT NULL THEN  -- the channel's untaken messages, on the inbox index up to the bound
        n := (SELECT count(*) FROM (SELECT 1 FROM messages
              WHERE messages.run_id = p_run_id AND messages.channel = p_channel AND messages.taken_seq IS NULL
                AND messages.set_aside IS NULL
              LIMIT p_max_waiting) w);
        IF n >= p_max_waiting THEN
            RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'full',
                format('%s: %s messages already wait untaken on this channel (OUTLAST_MAX_INBOX); nothing stored',
                       what, n);
            RETURN;
        END IF;
    END IF;
    IF p_max_waiting_run IS NOT NULL AND r.messages_waiting >= p_max_waiting_run THEN
        RETURN QUERY SELECT p_message_id, NULL::bigint, NULL::timestamptz, false, NULL::text, 'full',
            format('%s: %s messages already wait untaken in the run (OUTLAST_MAX_INBOX_RUN); nothing stored',
                   what, r.messages_waiting);
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

-- 0028's send, as older code calls it: its one bound counts the whole run, as it did.
CREATE OR REPLACE FUNCTION outlast_send_message(
    p_run_id text, p_channel text, p_payload jsonb, p_message_id text,
    p_max_bytes integer, p_max_waiting integer, p_via text)
RETURNS TABLE (message_id text, seq bigint, sent_at timestamptz, duplicate boolean, queue text,
               refusal text, refused text)
LANGUAGE sql AS $$
    SELECT * FROM outlast_send_message(p_run_id, p_channel, p_payload, p_message_id, p_max_bytes, NULL,
                                       p_max_waiting, p_via)
$$;

-- The functions below resolve every name in this schema, then pg_temp (never a caller's table or
-- function of the same name): their search_path is the one set here, for this transaction.
SELECT set_config('search_path', format('%I, pg_temp', current_schema()), true);

-- A send inside the caller's transaction (a transactional outbox): the message is stored, and its
-- run woken, only if that transaction commits (the sweeper publishes a run that became due). A
-- refusal raises, naming the run and the channel: nothing is stored. It runs as the schema's owner
-- (SECURITY DEFINER), so a caller needs EXECUTE on it and no right on any table; its limits are the
-- workers' (`send_limits`), whatever the caller's session says. Returns the message's receipt: its
-- id (given, or a random one), seq, sent_at and duplicate.
CREATE OR REPLACE FUNCTION outlast_send(run_id text, channel text, payload jsonb, message_id text DEFAULT NULL)
RETURNS TABLE (id text, seq bigint, sent_at timestamptz, duplicate boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
#variable_conflict use_variable
DECLARE
    s record;
BEGIN
    SELECT x.* INTO s FROM send_limits l, outlast_send_message(
        run_id, channel, payload, coalesce(message_id, gen_random_uuid()::text),
        l.max_payload, l.max_inbox, l.max_inbox_run, 'sql') x;
    IF s.refused IS NOT NULL THEN
        RAISE EXCEPTION '%', s.refused USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY SELECT s.message_id, s.seq, s.sent_at, s.duplicate;
END $$;

-- Only the roles granted it call the outbox; the inner send (which takes any `via` and any limits)
-- only the owner.
REVOKE EXECUTE ON FUNCTION outlast_send(text, text, jsonb, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outlast_send_message(text, text, jsonb, text, integer, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outlast_send_message(text, text, jsonb, text, integer, integer, integer, text)
    FROM PUBLIC;
