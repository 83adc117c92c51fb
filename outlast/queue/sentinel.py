"""With Redis Sentinel, the queue runs on whichever server the sentinels say is the primary now.

``redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?OPTIONS]``: the
sentinels (port 26379 when left out) and the name they monitor the primary by (``sentinel
monitor SERVICE ...``). ``USER:PASSWORD@`` is what the primary asks for (``requirepass`` or an
ACL user), not the sentinels. Options: ``db`` (like ``/DB``), ``username`` and ``password`` (like
``USER:PASSWORD@``), ``sentinel_username`` and ``sentinel_password`` (the sentinels' own
``requirepass``); values percent-encoded. Each new connection asks the sentinels for the
primary's address, so a failover is followed once the old primary's connections fail.

A failover may lose the stream entries the replica had not received yet: Redis replicates
asynchronously. ``Publishing.lost_data`` notices the new primary (its replication id changed) and
the sweeper re-publishes what Postgres says is due.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

from outlast._urls import SentinelURL, is_sentinel_url, parse_sentinel_url

__all__ = ["SentinelURL", "is_sentinel_url", "parse_sentinel_url", "sentinel_client"]


def sentinel_client(url: str, max_connections: int) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the service's primary (found through the sentinels at each new connection),
    and the sentinels' own clients (closed apart: the primary's client does not own them)."""
    u = parse_sentinel_url(url)
    asked: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}
    asked.update(username=u.sentinel_username, password=u.sentinel_password)
    # Any: redis-py types Sentinel's constructor in some releases and not in others.
    make: Any = Sentinel
    sentinel: Sentinel = make(list(u.sentinels), sentinel_kwargs=asked)
    primary = sentinel.master_for(
        u.service,
        db=u.db,
        username=u.username,
        password=u.password,
        socket_connect_timeout=5.0,
        max_connections=max_connections,
    )
    return primary, sentinel
