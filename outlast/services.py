"""This module says where Postgres and Redis are: the configured URLs, or the embedded default."""

from __future__ import annotations

from outlast.errors import ConfigError
from outlast.settings import Settings


def resolve(settings: Settings) -> tuple[Settings, str | None]:
    """Settings with both URLs set; with neither configured, start (or reuse) the embedded
    servers and return a one-line note saying so."""
    if settings.database_url and settings.redis_url:
        return settings, None
    if settings.database_url or settings.redis_url:
        missing = "OUTLAST_REDIS_URL" if settings.database_url else "OUTLAST_DATABASE_URL"
        raise ConfigError(f"{missing} is not set: set both URLs, or neither to use the embedded default")
    from outlast import _embedded as embedded  # only needed on the zero-setup path

    db, redis, how = embedded.ensure(settings.home)
    return settings.with_(database_url=db, redis_url=redis), f"outlast: using {how}"
