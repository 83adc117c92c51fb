-- The whole outlast schema, version 36: what its migrations
-- (outlast/store/migrations/NNNN_*.sql) make, as pg_dump 18 prints it. Generated; do not edit:
-- python -m outlast.store.dump [postgresql://USER@HOST/DB] > schema.sql

CREATE SCHEMA outlast;

CREATE FUNCTION outlast.outlast_add_counts(a bigint[], b bigint[]) RETURNS bigint[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i)
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

CREATE FUNCTION outlast.outlast_declared(p_workflow text, p_program text) RETURNS TABLE(channels jsonb)
    LANGUAGE sql STABLE
    AS $$
    SELECT d.channels FROM workflow_channels d
    WHERE d.workflow = p_workflow AND (p_program IS NULL OR d.program = p_program)
    ORDER BY d.published_at DESC LIMIT 1
$$;

CREATE FUNCTION outlast.outlast_event(run text, kind text, detail jsonb, write_id text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE sql
    AS $_$
    INSERT INTO events (run_id, kind, detail, write_id) VALUES ($1, $2, $3, $4) RETURNING id
$_$;

CREATE FUNCTION outlast.outlast_final(state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
$$;

CREATE FUNCTION outlast.outlast_final_is_final() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.state IN ('succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled')
       AND NEW IS DISTINCT FROM OLD THEN
        RAISE EXCEPTION 'run % is final (%): a finished run never changes', OLD.id, OLD.state
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE FUNCTION outlast.outlast_held_by(fencing_token bigint, state text, token bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT fencing_token = token AND outlast_leased(state)
$$;

CREATE FUNCTION outlast.outlast_journal_shown() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    b jsonb := NEW.body::jsonb;
BEGIN
    IF NEW.kind = 'state' THEN
        INSERT INTO run_state (run_id, key, value, version, seq)
        VALUES (NEW.run_id, b->>'key',
                coalesce(b->'value', jsonb_build_object('$refs', b->'$refs')), 1, NEW.seq)
        ON CONFLICT (run_id, key) DO UPDATE
            SET value = EXCLUDED.value, version = run_state.version + 1, seq = EXCLUDED.seq,
                updated_at = now();
        IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
            PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
        END IF;
    ELSE
        INSERT INTO events (run_id, kind, detail)
        VALUES (NEW.run_id, 'custom:' || (b->>'event'),
                jsonb_build_object('data', coalesce(b->'data', jsonb_build_object('$refs', b->'$refs')),
                                   'op', NEW.op_id, 'seq', NEW.seq));
    END IF;
    RETURN NULL;
END $_$;

CREATE FUNCTION outlast.outlast_leased(state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT state IN ('running', 'cancelling')
$$;

CREATE FUNCTION outlast.outlast_live(last_beat timestamp with time zone, lease_ttl double precision) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT last_beat >= now() - make_interval(secs => 3 * lease_ttl)
$$;

CREATE FUNCTION outlast.outlast_notify_events() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM watchers WHERE run_id = NEW.run_id) THEN
        PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.' || NEW.run_id), '');
    END IF;
    IF EXISTS (SELECT 1 FROM watchers WHERE run_id = '') THEN
        PERFORM pg_notify('outlast_' || md5(TG_TABLE_SCHEMA || '.'), '');
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION outlast.outlast_now() RETURNS TABLE(at timestamp with time zone)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT now() + shift FROM clock
$$;

CREATE TABLE outlast.pauses (
    scope text NOT NULL,
    target text NOT NULL,
    by jsonb,
    why text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT pauses_scope_check CHECK ((scope = ANY (ARRAY['run'::text, 'workflow'::text, 'queue'::text])))
);

CREATE FUNCTION outlast.outlast_pauses_of(run text, workflow text, queue text) RETURNS SETOF outlast.pauses
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT * FROM pauses
    WHERE (scope, target) IN (('run', run), ('workflow', workflow), ('queue', queue))
$$;

CREATE FUNCTION outlast.outlast_payload_bytes(run text) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(sum(size), 0)::bigint FROM payloads WHERE run_id = run
$$;

CREATE TABLE outlast.runs (
    id text NOT NULL,
    workflow text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    input jsonb NOT NULL,
    input_hash text NOT NULL,
    state text DEFAULT 'queued'::text NOT NULL,
    reason text,
    result jsonb,
    error jsonb,
    program text,
    fencing_token bigint DEFAULT 0 NOT NULL,
    owner text,
    lease_expires_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    deadline timestamp with time zone,
    wake_at timestamp with time zone,
    parent_id text,
    journal_head text DEFAULT ''::text NOT NULL,
    journal_len integer DEFAULT 0 NOT NULL,
    published_at timestamp with time zone DEFAULT now(),
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    budget_id text,
    trace_context jsonb,
    start_at timestamp with time zone,
    slot_key text,
    priority text DEFAULT 'normal'::text NOT NULL,
    tenant text,
    started_by text,
    waits_for text,
    started_at timestamp with time zone,
    messages_sent bigint DEFAULT 0 NOT NULL,
    messages_waiting integer DEFAULT 0 NOT NULL,
    waits_channels text[],
    generation integer DEFAULT 0 NOT NULL,
    op_base integer DEFAULT 0 NOT NULL,
    carried jsonb,
    journal_bytes bigint DEFAULT 0 NOT NULL,
    size_warned_at timestamp with time zone,
    CONSTRAINT runs_priority_check CHECK ((priority = ANY (ARRAY['high'::text, 'normal'::text, 'low'::text]))),
    CONSTRAINT runs_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'awaiting_approval'::text, 'cancelling'::text, 'succeeded'::text, 'partial'::text, 'failed'::text, 'timed_out'::text, 'exhausted'::text, 'cancelled'::text])))
);

CREATE FUNCTION outlast.outlast_redone(run text, token bigint, state text, reason text) RETURNS SETOF outlast.runs
    LANGUAGE sql STABLE
    AS $_$
    SELECT * FROM runs r
    WHERE r.id = $1 AND r.fencing_token = $2 AND r.state = $3 AND ($4 IS NULL OR r.reason = $4)
$_$;

CREATE FUNCTION outlast.outlast_send(run_id text, channel text, payload jsonb, message_id text DEFAULT NULL::text) RETURNS TABLE(id text, seq bigint, sent_at timestamp with time zone, duplicate boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'outlast', 'pg_temp'
    AS $$
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

CREATE FUNCTION outlast.outlast_send_message(p_run_id text, p_channel text, p_payload jsonb, p_message_id text, p_max_bytes integer, p_max_waiting integer, p_via text) RETURNS TABLE(message_id text, seq bigint, sent_at timestamp with time zone, duplicate boolean, queue text, refusal text, refused text)
    LANGUAGE sql
    AS $$
    SELECT * FROM outlast_send_message(p_run_id, p_channel, p_payload, p_message_id, p_max_bytes, NULL,
                                       p_max_waiting, p_via)
$$;

CREATE FUNCTION outlast.outlast_send_message(p_run_id text, p_channel text, p_payload jsonb, p_message_id text, p_max_bytes integer, p_max_waiting integer, p_max_waiting_run integer, p_via text) RETURNS TABLE(message_id text, seq bigint, sent_at timestamp with time zone, duplicate boolean, queue text, refusal text, refused text)
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION outlast.outlast_unfinished(state text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT state IN ('queued', 'running', 'waiting', 'awaiting_approval', 'cancelling')
$$;

CREATE FUNCTION outlast.outlast_window(queue text, tenant text, size integer, but text) RETURNS TABLE(used bigint)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $_$
    SELECT count(*) FROM (
        SELECT 1 FROM runs w
        WHERE w.state = 'queued' AND w.tenant = $2 AND w.published_at IS NOT NULL
          AND w.queue = $1 AND w.published_at <= (SELECT at FROM outlast_now()) AND ($4 IS NULL OR w.id <> $4)
        LIMIT $3) n
$_$;

CREATE TABLE outlast.approvals (
    id text NOT NULL,
    run_id text NOT NULL,
    op_id text NOT NULL,
    action text NOT NULL,
    args jsonb NOT NULL,
    args_hash text NOT NULL,
    policy_version text DEFAULT ''::text NOT NULL,
    approvers text[] NOT NULL,
    expires_at timestamp with time zone,
    status text DEFAULT 'pending'::text NOT NULL,
    decided_by text,
    comment text,
    new_args jsonb,
    decided_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    authenticated boolean DEFAULT false NOT NULL,
    decided_by_detail jsonb,
    CONSTRAINT approvals_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'rejected'::text, 'revised'::text])))
);

CREATE TABLE outlast.artifacts (
    run_id text NOT NULL,
    op_id text NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    media_type text NOT NULL,
    keep boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL
);

CREATE TABLE outlast.budgets (
    budget_id text NOT NULL,
    name text NOT NULL,
    limit_value numeric NOT NULL,
    spent numeric DEFAULT 0 NOT NULL,
    reserved numeric DEFAULT 0 NOT NULL,
    CONSTRAINT budgets_limit_value_check CHECK ((limit_value >= (0)::numeric))
);

CREATE TABLE outlast.clock (
    one boolean DEFAULT true NOT NULL,
    shift interval DEFAULT '00:00:00'::interval NOT NULL,
    CONSTRAINT clock_one_check CHECK (one)
);

CREATE TABLE outlast.dashboard_keys (
    name text NOT NULL,
    key bytea NOT NULL
);

CREATE TABLE outlast.dashboard_sessions (
    id_hash text NOT NULL,
    principal text NOT NULL,
    token_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE outlast.dashboard_sign_ins (
    address text NOT NULL,
    since timestamp with time zone NOT NULL,
    tries integer NOT NULL
);

CREATE TABLE outlast.events (
    id bigint CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
)
PARTITION BY HASH (run_id);

CREATE SEQUENCE outlast.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

ALTER SEQUENCE outlast.events_id_seq OWNED BY outlast.events.id;

CREATE TABLE outlast.events_p0 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p1 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p10 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p11 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p12 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p13 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p14 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p15 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p2 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p3 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p4 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p5 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p6 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p7 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p8 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.events_p9 (
    id bigint DEFAULT nextval('outlast.events_id_seq'::regclass) CONSTRAINT events_id_not_null1 NOT NULL,
    run_id text CONSTRAINT events_run_id_not_null1 NOT NULL,
    at timestamp with time zone DEFAULT now() CONSTRAINT events_at_not_null1 NOT NULL,
    kind text CONSTRAINT events_kind_not_null1 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb CONSTRAINT events_detail_not_null1 NOT NULL,
    write_id text
);

CREATE TABLE outlast.generations (
    run_id text NOT NULL,
    generation integer NOT NULL,
    input jsonb NOT NULL,
    op_base integer NOT NULL,
    journal_head text NOT NULL,
    journal_len integer NOT NULL,
    carried_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.journal (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
)
PARTITION BY HASH (run_id);

CREATE TABLE outlast.journal_p0 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p1 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p10 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p11 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p12 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p13 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p14 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p15 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p2 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p3 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p4 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p5 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p6 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p7 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p8 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_p9 (
    run_id text CONSTRAINT journal_run_id_not_null1 NOT NULL,
    seq integer CONSTRAINT journal_seq_not_null1 NOT NULL,
    kind text CONSTRAINT journal_kind_not_null1 NOT NULL,
    op_id text,
    body text CONSTRAINT journal_body_not_null1 NOT NULL,
    hash text CONSTRAINT journal_hash_not_null1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() CONSTRAINT journal_created_at_not_null1 NOT NULL
);

CREATE TABLE outlast.journal_past (
    run_id text NOT NULL,
    generation integer NOT NULL,
    seq integer NOT NULL,
    kind text NOT NULL,
    op_id text,
    body text NOT NULL,
    hash text NOT NULL,
    created_at timestamp with time zone NOT NULL
);

CREATE TABLE outlast.messages (
    run_id text NOT NULL,
    message_id text NOT NULL,
    channel text NOT NULL,
    seq bigint NOT NULL,
    payload jsonb NOT NULL,
    via text DEFAULT 'client'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    taken_seq integer,
    taken_op text,
    taken_at timestamp with time zone,
    set_aside text,
    set_aside_at timestamp with time zone
);

CREATE TABLE outlast.outlast_meta (
    key text NOT NULL,
    value text NOT NULL
);

CREATE TABLE outlast.payloads (
    run_id text NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    media_type text NOT NULL,
    body bytea,
    journaled boolean DEFAULT false NOT NULL,
    swept boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone NOT NULL
);

CREATE TABLE outlast.requests (
    run_id text NOT NULL,
    op_id text NOT NULL,
    name text NOT NULL,
    payload jsonb NOT NULL,
    response_schema jsonb NOT NULL,
    responders text[] DEFAULT '{}'::text[] NOT NULL,
    expires_at timestamp with time zone,
    status text DEFAULT 'pending'::text NOT NULL,
    answer jsonb,
    answered_by text,
    answered_by_detail jsonb,
    answered_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT requests_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'answered'::text, 'withdrawn'::text])))
);

CREATE TABLE outlast.reservations (
    budget_id text NOT NULL,
    run_id text NOT NULL,
    op_id text NOT NULL,
    name text NOT NULL,
    amount numeric NOT NULL
);

CREATE TABLE outlast.rollup_flushes (
    id text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.rollup_latency (
    minute timestamp with time zone NOT NULL,
    tool text NOT NULL,
    counts bigint[] NOT NULL
);

CREATE TABLE outlast.rollup_queues (
    minute timestamp with time zone NOT NULL,
    queue text NOT NULL,
    depth bigint NOT NULL,
    oldest_age double precision NOT NULL
);

CREATE TABLE outlast.rollup_runs (
    minute timestamp with time zone NOT NULL,
    started integer NOT NULL,
    finished integer NOT NULL,
    failed integer NOT NULL
);

CREATE TABLE outlast.rollup_turn (
    one boolean DEFAULT true NOT NULL,
    at timestamp with time zone NOT NULL,
    CONSTRAINT rollup_turn_one_check CHECK (one)
);

CREATE TABLE outlast.run_state (
    run_id text NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    version integer NOT NULL,
    seq integer NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.schedules (
    name text NOT NULL,
    workflow text NOT NULL,
    queue text NOT NULL,
    cron text NOT NULL,
    tz text NOT NULL,
    input jsonb NOT NULL,
    catch_up text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    last_tick timestamp with time zone DEFAULT now() NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT schedules_catch_up_check CHECK ((catch_up = ANY (ARRAY['latest'::text, 'none'::text, 'all'::text])))
);

CREATE TABLE outlast.send_limits (
    one boolean DEFAULT true NOT NULL,
    max_payload integer NOT NULL,
    max_inbox integer NOT NULL,
    max_inbox_run integer NOT NULL,
    published_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT send_limits_one_check CHECK (one)
);

CREATE TABLE outlast.served_programs (
    queue text NOT NULL,
    workflow text NOT NULL,
    program text NOT NULL,
    last_seen timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.settlements (
    run_id text NOT NULL,
    op_id text NOT NULL,
    settled_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.slots (
    key text NOT NULL,
    slot integer NOT NULL,
    run_id text NOT NULL,
    holder text NOT NULL,
    token bigint NOT NULL,
    expires_at timestamp with time zone NOT NULL
);

CREATE TABLE outlast.watchers (
    run_id text NOT NULL,
    pid integer NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE outlast.worker_code (
    name text NOT NULL,
    code_version integer NOT NULL
);

CREATE TABLE outlast.workers (
    name text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    programs jsonb DEFAULT '{}'::jsonb NOT NULL,
    concurrency integer NOT NULL,
    lease_ttl double precision NOT NULL,
    runs_held integer DEFAULT 0 NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_beat timestamp with time zone DEFAULT now() NOT NULL,
    tool_threads integer DEFAULT 0 NOT NULL,
    tool_threads_busy integer DEFAULT 0 NOT NULL
);

CREATE TABLE outlast.workflow_channels (
    workflow text NOT NULL,
    program text NOT NULL,
    channels jsonb,
    published_at timestamp with time zone DEFAULT now() NOT NULL
);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p0 FOR VALUES WITH (modulus 16, remainder 0);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p1 FOR VALUES WITH (modulus 16, remainder 1);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p10 FOR VALUES WITH (modulus 16, remainder 10);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p11 FOR VALUES WITH (modulus 16, remainder 11);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p12 FOR VALUES WITH (modulus 16, remainder 12);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p13 FOR VALUES WITH (modulus 16, remainder 13);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p14 FOR VALUES WITH (modulus 16, remainder 14);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p15 FOR VALUES WITH (modulus 16, remainder 15);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p2 FOR VALUES WITH (modulus 16, remainder 2);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p3 FOR VALUES WITH (modulus 16, remainder 3);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p4 FOR VALUES WITH (modulus 16, remainder 4);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p5 FOR VALUES WITH (modulus 16, remainder 5);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p6 FOR VALUES WITH (modulus 16, remainder 6);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p7 FOR VALUES WITH (modulus 16, remainder 7);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p8 FOR VALUES WITH (modulus 16, remainder 8);

ALTER TABLE ONLY outlast.events ATTACH PARTITION outlast.events_p9 FOR VALUES WITH (modulus 16, remainder 9);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p0 FOR VALUES WITH (modulus 16, remainder 0);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p1 FOR VALUES WITH (modulus 16, remainder 1);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p10 FOR VALUES WITH (modulus 16, remainder 10);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p11 FOR VALUES WITH (modulus 16, remainder 11);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p12 FOR VALUES WITH (modulus 16, remainder 12);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p13 FOR VALUES WITH (modulus 16, remainder 13);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p14 FOR VALUES WITH (modulus 16, remainder 14);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p15 FOR VALUES WITH (modulus 16, remainder 15);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p2 FOR VALUES WITH (modulus 16, remainder 2);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p3 FOR VALUES WITH (modulus 16, remainder 3);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p4 FOR VALUES WITH (modulus 16, remainder 4);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p5 FOR VALUES WITH (modulus 16, remainder 5);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p6 FOR VALUES WITH (modulus 16, remainder 6);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p7 FOR VALUES WITH (modulus 16, remainder 7);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p8 FOR VALUES WITH (modulus 16, remainder 8);

ALTER TABLE ONLY outlast.journal ATTACH PARTITION outlast.journal_p9 FOR VALUES WITH (modulus 16, remainder 9);

ALTER TABLE ONLY outlast.events ALTER COLUMN id SET DEFAULT nextval('outlast.events_id_seq'::regclass);

ALTER TABLE ONLY outlast.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (id);

ALTER TABLE ONLY outlast.approvals
    ADD CONSTRAINT approvals_run_id_op_id_key UNIQUE (run_id, op_id);

ALTER TABLE ONLY outlast.artifacts
    ADD CONSTRAINT artifacts_pkey PRIMARY KEY (run_id, op_id, name);

ALTER TABLE ONLY outlast.budgets
    ADD CONSTRAINT budgets_pkey PRIMARY KEY (budget_id, name);

ALTER TABLE ONLY outlast.clock
    ADD CONSTRAINT clock_pkey PRIMARY KEY (one);

ALTER TABLE ONLY outlast.dashboard_keys
    ADD CONSTRAINT dashboard_keys_pkey PRIMARY KEY (name);

ALTER TABLE ONLY outlast.dashboard_sessions
    ADD CONSTRAINT dashboard_sessions_pkey PRIMARY KEY (id_hash);

ALTER TABLE ONLY outlast.dashboard_sign_ins
    ADD CONSTRAINT dashboard_sign_ins_pkey PRIMARY KEY (address);

ALTER TABLE ONLY outlast.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p0
    ADD CONSTRAINT events_p0_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p10
    ADD CONSTRAINT events_p10_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p11
    ADD CONSTRAINT events_p11_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p12
    ADD CONSTRAINT events_p12_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p13
    ADD CONSTRAINT events_p13_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p14
    ADD CONSTRAINT events_p14_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p15
    ADD CONSTRAINT events_p15_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p1
    ADD CONSTRAINT events_p1_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p2
    ADD CONSTRAINT events_p2_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p3
    ADD CONSTRAINT events_p3_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p4
    ADD CONSTRAINT events_p4_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p5
    ADD CONSTRAINT events_p5_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p6
    ADD CONSTRAINT events_p6_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p7
    ADD CONSTRAINT events_p7_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p8
    ADD CONSTRAINT events_p8_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.events_p9
    ADD CONSTRAINT events_p9_pkey PRIMARY KEY (run_id, id);

ALTER TABLE ONLY outlast.generations
    ADD CONSTRAINT generations_pkey PRIMARY KEY (run_id, generation);

ALTER TABLE ONLY outlast.journal
    ADD CONSTRAINT journal_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p0
    ADD CONSTRAINT journal_p0_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p10
    ADD CONSTRAINT journal_p10_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p11
    ADD CONSTRAINT journal_p11_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p12
    ADD CONSTRAINT journal_p12_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p13
    ADD CONSTRAINT journal_p13_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p14
    ADD CONSTRAINT journal_p14_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p15
    ADD CONSTRAINT journal_p15_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p1
    ADD CONSTRAINT journal_p1_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p2
    ADD CONSTRAINT journal_p2_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p3
    ADD CONSTRAINT journal_p3_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p4
    ADD CONSTRAINT journal_p4_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p5
    ADD CONSTRAINT journal_p5_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p6
    ADD CONSTRAINT journal_p6_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p7
    ADD CONSTRAINT journal_p7_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p8
    ADD CONSTRAINT journal_p8_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_p9
    ADD CONSTRAINT journal_p9_pkey PRIMARY KEY (run_id, seq);

ALTER TABLE ONLY outlast.journal_past
    ADD CONSTRAINT journal_past_pkey PRIMARY KEY (run_id, generation, seq);

ALTER TABLE ONLY outlast.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (run_id, message_id);

ALTER TABLE ONLY outlast.outlast_meta
    ADD CONSTRAINT outlast_meta_pkey PRIMARY KEY (key);

ALTER TABLE ONLY outlast.pauses
    ADD CONSTRAINT pauses_pkey PRIMARY KEY (scope, target);

ALTER TABLE ONLY outlast.payloads
    ADD CONSTRAINT payloads_pkey PRIMARY KEY (run_id, sha256);

ALTER TABLE ONLY outlast.requests
    ADD CONSTRAINT requests_pkey PRIMARY KEY (run_id, op_id);

ALTER TABLE ONLY outlast.reservations
    ADD CONSTRAINT reservations_pkey PRIMARY KEY (run_id, op_id, name);

ALTER TABLE ONLY outlast.rollup_flushes
    ADD CONSTRAINT rollup_flushes_pkey PRIMARY KEY (id);

ALTER TABLE ONLY outlast.rollup_latency
    ADD CONSTRAINT rollup_latency_pkey PRIMARY KEY (minute, tool);

ALTER TABLE ONLY outlast.rollup_queues
    ADD CONSTRAINT rollup_queues_pkey PRIMARY KEY (minute, queue);

ALTER TABLE ONLY outlast.rollup_runs
    ADD CONSTRAINT rollup_runs_pkey PRIMARY KEY (minute);

ALTER TABLE ONLY outlast.rollup_turn
    ADD CONSTRAINT rollup_turn_pkey PRIMARY KEY (one);

ALTER TABLE ONLY outlast.run_state
    ADD CONSTRAINT run_state_pkey PRIMARY KEY (run_id, key);

ALTER TABLE ONLY outlast.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY outlast.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (name);

ALTER TABLE ONLY outlast.send_limits
    ADD CONSTRAINT send_limits_pkey PRIMARY KEY (one);

ALTER TABLE ONLY outlast.served_programs
    ADD CONSTRAINT served_programs_pkey PRIMARY KEY (queue, workflow, program);

ALTER TABLE ONLY outlast.settlements
    ADD CONSTRAINT settlements_pkey PRIMARY KEY (run_id, op_id);

ALTER TABLE ONLY outlast.slots
    ADD CONSTRAINT slots_pkey PRIMARY KEY (key, slot);

ALTER TABLE ONLY outlast.worker_code
    ADD CONSTRAINT worker_code_pkey PRIMARY KEY (name);

ALTER TABLE ONLY outlast.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (name);

ALTER TABLE ONLY outlast.workflow_channels
    ADD CONSTRAINT workflow_channels_pkey PRIMARY KEY (workflow, program);

CREATE INDEX artifacts_payload ON outlast.artifacts USING btree (run_id, sha256);

CREATE INDEX dashboard_sessions_expires ON outlast.dashboard_sessions USING btree (expires_at);

CREATE INDEX generations_by_carried ON outlast.generations USING btree (carried_at);

CREATE INDEX messages_inbox ON outlast.messages USING btree (run_id, channel, seq) WHERE (taken_seq IS NULL);

CREATE INDEX payloads_swept ON outlast.payloads USING btree (run_id) WHERE swept;

CREATE INDEX payloads_unjournaled ON outlast.payloads USING btree (created_at) WHERE (NOT journaled);

CREATE INDEX runs_by_budget ON outlast.runs USING btree (budget_id) WHERE (budget_id IS NOT NULL);

CREATE INDEX runs_by_created ON outlast.runs USING btree (created_at DESC, id DESC);

CREATE INDEX runs_by_finished ON outlast.runs USING btree (finished_at DESC, id DESC) WHERE (finished_at IS NOT NULL);

CREATE INDEX runs_by_id_prefix ON outlast.runs USING btree (id COLLATE "C");

CREATE INDEX runs_by_input ON outlast.runs USING gin (input jsonb_path_ops);

CREATE INDEX runs_by_parent ON outlast.runs USING btree (parent_id) WHERE (parent_id IS NOT NULL);

CREATE INDEX runs_by_priority ON outlast.runs USING btree (priority, created_at DESC, id DESC);

CREATE INDEX runs_by_queue ON outlast.runs USING btree (queue, created_at DESC, id DESC);

CREATE INDEX runs_by_started ON outlast.runs USING btree (started_at DESC, id DESC) WHERE (started_at IS NOT NULL);

CREATE INDEX runs_by_state ON outlast.runs USING btree (state, created_at DESC, id DESC);

CREATE INDEX runs_by_tenant ON outlast.runs USING btree (tenant, created_at DESC, id DESC) WHERE (tenant IS NOT NULL);

CREATE INDEX runs_by_workflow ON outlast.runs USING btree (workflow, created_at DESC, id DESC);

CREATE INDEX runs_children ON outlast.runs USING btree (started_by, created_at DESC, id DESC) WHERE (started_by IS NOT NULL);

CREATE INDEX runs_deadline ON outlast.runs USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'awaiting_approval'::text, 'cancelling'::text])));

CREATE INDEX runs_held ON outlast.runs USING btree (queue, tenant, (
CASE priority
    WHEN 'high'::text THEN 0
    WHEN 'normal'::text THEN 1
    ELSE 2
END), created_at) WHERE ((state = 'queued'::text) AND (published_at IS NULL));

CREATE INDEX runs_in_doubt ON outlast.runs USING btree (created_at DESC, id DESC) WHERE ((state = 'waiting'::text) AND (reason = 'in_doubt'::text));

CREATE INDEX runs_parked_for_slot ON outlast.runs USING btree (slot_key, wake_at) WHERE ((state = 'waiting'::text) AND (reason = 'concurrency_slot'::text));

CREATE INDEX runs_tenant_window ON outlast.runs USING btree (queue, tenant, published_at) WHERE ((state = 'queued'::text) AND (tenant IS NOT NULL) AND (published_at IS NOT NULL));

CREATE INDEX runs_unfinished ON outlast.runs USING btree (published_at) WHERE (state = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'awaiting_approval'::text, 'cancelling'::text]));

CREATE INDEX runs_waiting_child ON outlast.runs USING btree (id) WHERE ((state = 'waiting'::text) AND (reason = 'child'::text));

CREATE INDEX runs_waiting_first ON outlast.runs USING btree (id) WHERE ((reason = 'first'::text) AND (waits_for IS NOT NULL));

CREATE INDEX slots_by_run ON outlast.slots USING btree (run_id);

CREATE INDEX watchers_by_run ON outlast.watchers USING btree (run_id);

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p0_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p10_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p11_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p12_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p13_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p14_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p15_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p1_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p2_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p3_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p4_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p5_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p6_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p7_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p8_pkey;

ALTER INDEX outlast.events_pkey ATTACH PARTITION outlast.events_p9_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p0_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p10_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p11_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p12_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p13_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p14_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p15_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p1_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p2_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p3_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p4_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p5_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p6_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p7_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p8_pkey;

ALTER INDEX outlast.journal_pkey ATTACH PARTITION outlast.journal_p9_pkey;

CREATE TRIGGER events_notify AFTER INSERT ON outlast.events FOR EACH ROW EXECUTE FUNCTION outlast.outlast_notify_events();

CREATE TRIGGER journal_shown AFTER INSERT ON outlast.journal FOR EACH ROW WHEN ((new.kind = ANY (ARRAY['state'::text, 'event'::text]))) EXECUTE FUNCTION outlast.outlast_journal_shown();

CREATE TRIGGER runs_final_is_final BEFORE UPDATE ON outlast.runs FOR EACH ROW EXECUTE FUNCTION outlast.outlast_final_is_final();

ALTER TABLE ONLY outlast.approvals
    ADD CONSTRAINT approvals_run_id_fkey FOREIGN KEY (run_id) REFERENCES outlast.runs(id);

ALTER TABLE outlast.events
    ADD CONSTRAINT events_run_id_fkey1 FOREIGN KEY (run_id) REFERENCES outlast.runs(id);

ALTER TABLE outlast.journal
    ADD CONSTRAINT journal_run_id_fkey1 FOREIGN KEY (run_id) REFERENCES outlast.runs(id);

ALTER TABLE ONLY outlast.messages
    ADD CONSTRAINT messages_run_id_fkey FOREIGN KEY (run_id) REFERENCES outlast.runs(id);

ALTER TABLE ONLY outlast.requests
    ADD CONSTRAINT requests_run_id_fkey FOREIGN KEY (run_id) REFERENCES outlast.runs(id) ON DELETE CASCADE;

ALTER TABLE ONLY outlast.runs
    ADD CONSTRAINT runs_parent_id_fkey FOREIGN KEY (parent_id) REFERENCES outlast.runs(id);

ALTER TABLE ONLY outlast.worker_code
    ADD CONSTRAINT worker_code_name_fkey FOREIGN KEY (name) REFERENCES outlast.workers(name) ON DELETE CASCADE;
