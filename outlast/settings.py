"""One settings object, read once at start from ``OUTLAST_*`` variables (or given directly)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Settings:
    """Everything outlast can be told. Nothing deeper reads the environment."""

    database_url: str | None = None
    redis_url: str | None = None
    schema: str = "outlast"
    prefix: str = "outlast"
    home: Path = field(default_factory=lambda: Path(".outlast"))
    queue: str = "default"
    lease_ttl: float = 30.0
    max_attempts: int = 5
    sweep_interval: float = 1.0
    republish_after: float = 30.0
    grace: float = 10.0
    concurrency: int = 16
    worker_name: str | None = None
    failpoints: str = ""
    log_format: str = "auto"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``OUTLAST_*`` variables; explicit overrides (not None) win."""
        e = os.environ if env is None else env
        s = cls(
            database_url=e.get("OUTLAST_DATABASE_URL") or None,
            redis_url=e.get("OUTLAST_REDIS_URL") or None,
            schema=e.get("OUTLAST_SCHEMA", "outlast"),
            prefix=e.get("OUTLAST_PREFIX", "outlast"),
            home=Path(e.get("OUTLAST_HOME", ".outlast")),
            queue=e.get("OUTLAST_QUEUE", "default"),
            lease_ttl=float(e.get("OUTLAST_LEASE_TTL", "30")),
            max_attempts=int(e.get("OUTLAST_MAX_ATTEMPTS", "5")),
            sweep_interval=float(e.get("OUTLAST_SWEEP_INTERVAL", "1")),
            republish_after=float(e.get("OUTLAST_REPUBLISH_AFTER", "30")),
            grace=float(e.get("OUTLAST_GRACE", "10")),
            concurrency=int(e.get("OUTLAST_CONCURRENCY", "16")),
            worker_name=e.get("OUTLAST_WORKER_NAME") or None,
            failpoints=e.get("OUTLAST_FAILPOINTS", ""),
            log_format=e.get("OUTLAST_LOG_FORMAT", "auto"),
        )
        return s.with_(**overrides)

    def with_(self, **overrides: Any) -> Settings:
        """A copy with the given fields replaced (None means: keep)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
