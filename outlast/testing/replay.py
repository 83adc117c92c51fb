"""Yesterday's runs can serve as regression tests. A bundle (``outlast export RUN -o DIR``) kept beside
the tests is replayed against today's code with no services::

    from outlast.testing import assert_replays

    def test_order_42_still_replays():
        assert_replays(Path(__file__).parent / "bundles" / "order-42", app)

A change of the workflow that would break the run fails the test, naming the crossing, what the
journal has, what the code asks and both arguments hashes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from outlast._replay import Report, replay_bundle as _replay_bundle
from outlast.app import App


def replay_bundle(path: Path | str, app: App, *, secret_key: str | None = None) -> Report:
    """Replay the bundle in directory ``path`` against ``app`` (``secret_key``: the workers' key,
    needed when the app declares secret arguments); the report says whether the code agrees."""
    return asyncio.run(_replay_bundle(Path(path), app, secret_key=secret_key))


def assert_replays(path: Path | str, app: App, *, secret_key: str | None = None) -> Report:
    """``replay_bundle``, failing the test (``AssertionError`` with the report) unless the code
    agrees with the bundle's run."""
    report = replay_bundle(path, app, secret_key=secret_key)
    if not report.agrees:
        raise AssertionError(f"the code no longer replays {path}:\n{report}")
    return report
