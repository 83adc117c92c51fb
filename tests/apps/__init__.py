"""Apps served by the test workers, and what their tools share: a connection to the test's schema."""

from __future__ import annotations

import os
from typing import Any

import psycopg


def setup_tables(database_url: str, schema: str, ddl: str) -> None:
    """Create a test app's tables in ``schema`` (idempotent DDL)."""
    with psycopg.connect(database_url, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute(ddl.encode())


def connect() -> psycopg.Connection[Any]:
    """A connection to the schema the worker serves (the tools' world lives beside outlast's tables;
    ``TEST_WORLD_URL`` reaches it directly when outlast goes through a pooler)."""
    url = os.environ.get("TEST_WORLD_URL") or os.environ["OUTLAST_DATABASE_URL"]
    schema = os.environ["OUTLAST_SCHEMA"]
    return psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}")
