-- The dashboard's sessions, sign-in attempts and CSRF signing key (sessions.py, 0019).

-- name: session_create
INSERT INTO dashboard_sessions (id_hash, principal, token_hash, expires_at)
VALUES (%(id_hash)s, %(principal)s, %(token_hash)s, now() + make_interval(secs => %(seconds)s))
RETURNING created_at;

-- name: session_get
-- A live session's user, the token hash it was made with and when: never past its lifetime from
-- then, whatever its expires_at says.
SELECT principal, token_hash, created_at FROM dashboard_sessions
WHERE id_hash = %(id_hash)s AND expires_at > now()
  AND created_at > now() - make_interval(secs => %(seconds)s);

-- name: session_end
DELETE FROM dashboard_sessions WHERE id_hash = %(id_hash)s;

-- name: sessions_keep_only
-- After the users file changed: end every session whose user is gone or has a new token.
DELETE FROM dashboard_sessions s
WHERE NOT EXISTS (
    SELECT 1 FROM unnest(%(names)s::text[], %(hashes)s::text[]) AS u(name, hash)
    WHERE u.name = s.principal AND u.hash = s.token_hash)
RETURNING s.principal;

-- name: sessions_prune
DELETE FROM dashboard_sessions WHERE expires_at <= now();

-- name: sign_in_try
-- One more attempt from ``address``: the attempts in its current window, this one included.
INSERT INTO dashboard_sign_ins AS t (address, since, tries) VALUES (%(address)s, now(), 1)
ON CONFLICT (address) DO UPDATE SET
    since = CASE WHEN t.since <= now() - make_interval(secs => %(window)s) THEN now() ELSE t.since END,
    tries = CASE WHEN t.since <= now() - make_interval(secs => %(window)s) THEN 1 ELSE t.tries + 1 END
RETURNING tries;

-- name: sign_ins_prune
DELETE FROM dashboard_sign_ins WHERE since <= now() - make_interval(secs => %(window)s);

-- name: dashboard_key
-- The CSRF signing key: this one if none was made yet, else the one made first.
WITH made AS (
    INSERT INTO dashboard_keys (name, key) VALUES (%(key_name)s, %(key)s)
    ON CONFLICT (name) DO NOTHING RETURNING key)
SELECT key FROM made
UNION ALL
SELECT key FROM dashboard_keys WHERE name = %(key_name)s;
