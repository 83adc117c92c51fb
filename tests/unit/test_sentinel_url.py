"""A ``redis+sentinel://`` URL: taken apart, checked at settings time, redacted in messages, and
given to the Sentinel client (no server needed: it asks the sentinels at its first command)."""

from __future__ import annotations

import pytest

from outlast.errors import ConfigError
from outlast.queue import Queue
from outlast.queue.sentinel import parse_sentinel_url
from outlast.settings import Settings
from outlast.store import redact


def test_a_sentinel_url_is_taken_apart() -> None:
    """Sentinels (default port 26379), service, db, the primary's and the sentinels' credentials;
    a malformed URL is refused at settings time, naming the fault without the password."""
    u = parse_sentinel_url("redis+sentinel://:p%40ss@h1:26380,h2,[::1]:26381/svc/3?sentinel_password=sp")
    assert u.sentinels == (("h1", 26380), ("h2", 26379), ("::1", 26381))
    assert (u.service, u.db, u.username, u.password, u.sentinel_password) == ("svc", 3, None, "p@ss", "sp")
    u = parse_sentinel_url("redis+sentinel://h1:1/svc?db=2&username=app&password=pw&sentinel_username=s")
    assert (u.db, u.username, u.password, u.sentinel_username) == (2, "app", "pw", "s")
    ok = "redis+sentinel://:secret@h1:26379,h2:26379/svc"
    assert Settings.from_env({"OUTLAST_REDIS_URL": ok}).redis_url == ok
    for bad, says in [
        ("redis+sentinel://:secret@h1:26379/", "/SERVICE"),
        ("redis+sentinel://:secret@h1:x/svc", "HOST:PORT"),
        ("redis+sentinel://:secret@h1/svc?passwd=secret", "unknown Sentinel URL option 'passwd'"),
        ("redis+sentinel://:secret@h1/svc/zero", "database is a number"),
    ]:
        with pytest.raises(ConfigError, match=says) as refused:
            Settings.from_env({"OUTLAST_REDIS_URL": bad})
        assert "secret" not in str(refused.value)


async def test_a_sentinel_url_picks_the_sentinel_client() -> None:
    """No server needed: the client asks the sentinels at its first command."""
    q = Queue("redis+sentinel://:pw@127.0.0.1:1,127.0.0.1:2/svc/4", "p", connections=8)
    assert q.sentinel and not q.cluster
    assert q.redis.connection_pool.service_name == "svc"
    assert q.redis.connection_pool.connection_kwargs["db"] == 4
    await q.close()


def test_a_sentinel_url_is_redacted() -> None:
    shown = redact("redis+sentinel://:pw1@h1:1,h2:2/svc?sentinel_password=pw2&password=pw3")
    assert "pw" not in shown and shown.startswith("redis+sentinel://:***@h1:1,h2:2/svc?")
