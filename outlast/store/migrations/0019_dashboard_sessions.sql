-- compat: expand
-- Version 19: the dashboard's sessions, sign-in attempts and signing key live here, so that
-- several dashboard processes behind one load balancer share them (no sticky sessions) and a
-- restart signs nobody out.

-- A session made by signing in. The cookie carries the session id; this table holds only its
-- SHA-256, so reading the table gives no usable session. The user's token hash at sign-in is kept:
-- a user removed from the users file, or given a new token, loses the session at the next request.
CREATE TABLE dashboard_sessions (
    id_hash    text PRIMARY KEY,
    principal  text NOT NULL,
    token_hash text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

-- Sign-in attempts per client address (and per proxy), in a fixed window; rows older than the
-- window are deleted by the next attempt, so the table holds at most one window of addresses.
CREATE TABLE dashboard_sign_ins (
    address text PRIMARY KEY,
    since   timestamptz NOT NULL,
    tries   integer NOT NULL
);

-- The key that signs CSRF tokens, made by the first dashboard process that needs it.
CREATE TABLE dashboard_keys (
    name text PRIMARY KEY,
    key  bytea NOT NULL
);
