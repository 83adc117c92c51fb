"""The pytest plugin (entry point ``pytest11``) gives the ``outlast_harness`` and ``outlast_servers``
fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import pytest

from outlast.app import App
from outlast.settings import env_var
from outlast.testing.harness import Harness


class HarnessFactory(Protocol):
    """``HarnessFactory`` is the ``outlast_harness`` fixture: call it with an app (and settings) for
    a Harness."""

    def __call__(self, app: App, *, app_spec: str | None = None, **settings: Any) -> Harness: ...


def _configured(env: Mapping[str, str]) -> tuple[str, str] | None:
    for db_var, redis_var in (
        ("OUTLAST_TEST_DATABASE_URL", "OUTLAST_TEST_REDIS_URL"),
        (env_var("database_url"), env_var("redis_url")),
    ):
        db, rd = env.get(db_var), env.get(redis_var)
        if db and rd:
            return db, rd
        if db or rd:
            missing = redis_var if db else db_var
            raise pytest.UsageError(f"{missing} is not set: set both URLs, or neither")
    return None


@pytest.fixture(scope="session")
def outlast_servers(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(database URL, Redis URL) of the servers the harnesses use; see the package doc."""
    found = _configured(os.environ)
    if found is not None:
        yield found
        return
    from outlast import _embedded as embedded

    home = Path(os.environ.get(env_var("home")) or request.config.rootpath / ".outlast")
    db, rd, how = embedded.ensure(home)
    yield db, rd
    if "(started" in how:
        embedded.stop(home)


@pytest.fixture
def outlast_harness(outlast_servers: tuple[str, str], tmp_path: Path) -> Iterator[HarnessFactory]:
    """Make a ``Harness`` for an app: ``h = outlast_harness(app, lease_ttl=1)``. Each has its own
    schema and key prefix; after the test its workers are stopped, replaced tools put back, and
    its schema and keys dropped."""
    made: list[Harness] = []
    db, rd = outlast_servers

    def make(app: App, *, app_spec: str | None = None, **settings: Any) -> Harness:
        logs = tmp_path / f"outlast-harness-{len(made)}"
        h = Harness.create(app, db, rd, app_spec=app_spec, logs=logs, **settings)
        made.append(h)
        return h

    yield make
    errors: list[BaseException] = []
    for h in reversed(made):
        try:
            h.close()
        except BaseException as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
