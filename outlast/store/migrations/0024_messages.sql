-- compat: expand
-- Version 24: messages into a run. A run's inbox (`messages`), each message kept until the run
-- takes it (one fenced statement with the journal entry that records it), numbered in the order
-- it was accepted; two counters on the run row that every send and every wait on a message
-- update, so that they serialize on the row and no wake-up is lost; and `outlast_send`, a send
-- inside the producer's own transaction (a transactional outbox). New table, columns with
-- defaults and functions only: older code neither reads nor writes them.

-- The run's n-th accepted message (`messages_sent`, monotonic: a wait commits only if it is still
-- the count the worker looked at), and how many wait untaken (`messages_waiting`, the per-run cap).
ALTER TABLE runs ADD COLUMN messages_sent bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN messages_waiting integer NOT NULL DEFAULT 0;

CREATE TABLE messages (
    run_id      text NOT NULL REFERENCES runs (id),
    message_id  text NOT NULL,            -- the sender's id (or a random one): one message per id per run
    channel     text NOT NULL,
    seq         bigint NOT NULL,          -- the run's n-th message accepted: its order
    payload     jsonb NOT NULL,
    via         text NOT NULL DEFAULT 'client',  -- client, sql, callback
    created_at  timestamptz NOT NULL DEFAULT now(),
    taken_seq   integer,                  -- the journal entry that took it (NULL: in the inbox)
    taken_op    text,                     -- the operation (the receive) that took it
    taken_at    timestamptz,
    PRIMARY KEY (run_id, message_id)
);
-- The inbox: the untaken messages of a run's channel, oldest first.
CREATE INDEX messages_inbox ON messages (run_id, channel, seq) WHERE taken_seq IS NULL;

-- One send, said once for the client (`send`), the callbacks and `outlast_send`. The run row is
-- locked first: sends to one run, and a send and the run's wait on a message, are serialized on
-- it (the wait commits only if `messages_sent` is still what its worker looked at). A message id
-- already stored is the first send's receipt (`duplicate`); refused, nothing is stored and
-- `refused` says why in one line naming the run and the channel. A run waiting on this very
-- channel becomes due (`wake_at` now): the client publishes it at once (`queue`), the sweeper's
-- `due` otherwise, and only once this transaction commits.
CREATE FUNCTION outlast_send_message(
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
           runs.queue AS q INTO r
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
    woke := r.state = 'waiting' AND r.reason = 'message' AND r.waits_for = p_channel
            AND (r.wake_at IS NULL OR r.wake_at > at);
    UPDATE runs SET messages_sent = runs.messages_sent + 1, messages_waiting = runs.messages_waiting + 1,
        wake_at = CASE WHEN woke THEN at ELSE runs.wake_at END
    WHERE runs.id = p_run_id RETURNING runs.messages_sent INTO n;
    INSERT INTO messages (run_id, message_id, channel, seq, payload, via)
    VALUES (p_run_id, p_message_id, p_channel, n, p_payload, p_via)
    RETURNING messages.created_at INTO at;
    RETURN QUERY SELECT p_message_id, n, at, false, CASE WHEN woke THEN r.q END, NULL::text, NULL::text;
END $$;

-- A send inside the caller's transaction (a transactional outbox): the message is stored, and its
-- run woken, only if that transaction commits (the sweeper publishes a run that became due). A
-- refusal raises, naming the run and the channel: nothing is stored. The limits are the settings
-- `outlast.max_payload` and `outlast.max_inbox` of the session, if set, else the defaults. Returns
-- the message's receipt: its id (given, or a random one), seq, sent_at and duplicate.
CREATE FUNCTION outlast_send(run_id text, channel text, payload jsonb, message_id text DEFAULT NULL)
RETURNS TABLE (id text, seq bigint, sent_at timestamptz, duplicate boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    s record;
BEGIN
    SELECT * INTO s FROM outlast_send_message(
        run_id, channel, payload, coalesce(message_id, gen_random_uuid()::text),
        coalesce(nullif(current_setting('outlast.max_payload', true), '')::integer, 1048576),
        coalesce(nullif(current_setting('outlast.max_inbox', true), '')::integer, 1000), 'sql') x;
    IF s.refused IS NOT NULL THEN
        RAISE EXCEPTION '%', s.refused USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY SELECT s.message_id, s.seq, s.sent_at, s.duplicate;
END $$;
