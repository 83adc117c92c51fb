"""Workflows are tested here in pytest, on real Postgres and Redis.

A ``Harness`` gives one app a private Postgres schema and Redis key prefix on the configured
servers, runs a worker in this process (on a thread and event loop of its own, so it serves sync
and async tests alike), and lets a test replace a tool, move durable waits forward, crash the
worker at a named crash point (in this process) or kill a real worker process there, and read the
journal and the events. The ``outlast_harness`` fixture (a pytest plugin, loaded through the
``pytest11`` entry point; or import it into a conftest) makes one per call and, after the test,
stops its workers and drops its schema and keys::

    def test_order(outlast_harness):
        h = outlast_harness(app)
        h.start_worker()
        run = h.client.enqueue("order", {"item": "book"})
        assert h.wait(run.id).state == "succeeded"

Servers: ``OUTLAST_TEST_DATABASE_URL`` / ``OUTLAST_TEST_REDIS_URL``, else ``OUTLAST_DATABASE_URL``
/ ``OUTLAST_REDIS_URL``, else the embedded default (started for the session under
``OUTLAST_HOME`` or ``.outlast/`` at the pytest root, and stopped after it if the session started it).

``replay_bundle`` / ``assert_replays`` replay a run exported as a bundle against today's code, with
no servers at all: yesterday's runs kept as regression tests.
"""

from __future__ import annotations

from outlast.testing.harness import Harness, Replacement
from outlast.testing.plugin import HarnessFactory, outlast_harness, outlast_servers
from outlast.testing.replay import assert_replays, replay_bundle
from outlast.testing.worker import Crashed

__all__ = [
    "Crashed",
    "Harness",
    "HarnessFactory",
    "Replacement",
    "assert_replays",
    "outlast_harness",
    "outlast_servers",
    "replay_bundle",
]
