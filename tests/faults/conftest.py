"""Fixtures of the fault tests: one private Postgres cluster and one private Redis for the session
(initdb is slow), a fresh schema and key prefix per test, the world's tables on the shared test
Postgres (which no test stops)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apps import faults as faults_app
from tests.conftest import drop_keys, drop_schemas, migrate_schema
from tests.faults import FaultWorld, PrivatePostgres, PrivateRedis


@pytest.fixture(scope="session")
def private_servers() -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    root = Path(tempfile.mkdtemp(prefix="outlast-faults-"))
    root.chmod(0o755)  # the postgres user must reach its directory
    pg = PrivatePostgres(root)
    rd = PrivateRedis(root)

    def clean() -> None:
        pg.destroy()
        rd.stop()
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(clean)  # also when the session dies before its finalizers
    try:
        pg.init()
        pg.start()
        rd.start()
        yield pg, rd
    finally:
        clean()
        atexit.unregister(clean)


@pytest.fixture
def fw(
    services: tuple[str, str], private_servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path
) -> Iterator[FaultWorld]:
    pg, rd = private_servers
    pg.ensure_up()
    rd.ensure_up()
    shared_db, _shared_redis = services
    tag = uuid.uuid4().hex[:10]
    w = FaultWorld(
        pg.url(), rd.url, f"t_{tag}", f"t{tag}", tmp_path,
        effects_url=shared_db, effects_schema=f"fx_{tag}", pg=pg, rd=rd,
    )  # fmt: skip

    migrate_schema(w.database_url, w.schema)
    faults_app.setup(w.effects_url, w.effects_schema)
    try:
        yield w
    finally:
        w.stop_all()
        pg.ensure_up()
        rd.ensure_up()
        drop_schemas(w.database_url, w.schema)
        drop_schemas(w.effects_url, w.effects_schema)
        drop_keys(w)
