"""Postgres: the source of truth. The only package that speaks SQL."""

from outlast.store.store import (
    SCHEMA_VERSION,
    ChildStart,
    Claimed,
    OnWait,
    Pruned,
    Store,
    redact,
    schema_sql,
)

__all__ = ["SCHEMA_VERSION", "ChildStart", "Claimed", "OnWait", "Pruned", "Store", "redact", "schema_sql"]
