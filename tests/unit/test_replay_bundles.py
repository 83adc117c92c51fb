"""Yesterday's runs as regression tests, with no server at all: bundles exported from real runs
(tests/bundles, made by a real worker on real Postgres and Redis) replayed against the code that
made them, the same crossings written otherwise, and a changed workflow that must be caught."""

from __future__ import annotations

from pathlib import Path

import pytest

from outlast._journal import args_hash
from outlast._replay import Verdict
from outlast.errors import ConfigError
from outlast.testing import assert_replays, replay_bundle
from tests.apps import orders

BUNDLES = Path(__file__).parent.parent / "bundles" / "orders"
KEY = "k" * 32  # the key of the workers that made them


@pytest.mark.parametrize("name", ["order-2-books", "order-6-approved", "order-8-lamps"])
def test_kept_runs_replay_against_the_same_crossings(name: str) -> None:
    """Finished, finished after an approval (its decision kept whole by the bundle), waiting."""
    for app in (orders.app, orders.same):
        assert assert_replays(BUNDLES / name, app, secret_key=KEY).agrees


def test_a_finished_run_is_compared_to_its_end_and_a_changed_charge_is_caught() -> None:
    done = replay_bundle(BUNDLES / "order-2-books", orders.app, secret_key=KEY)
    assert done.where.startswith("the end: succeeded with") and done.where.endswith("as journaled")
    caught = replay_bundle(BUNDLES / "order-2-books", orders.changed, secret_key=KEY)
    assert caught.verdict == Verdict.DIVERGES and caught.divergence is not None
    d = caught.divergence
    assert (d.crossing, d.operation, d.journal, d.code) == (
        3,
        "op-2",
        'charge({"amount":25.0})',
        'charge({"amount":26.5})',
    )
    assert (d.journal_hash, d.code_hash) == (args_hash({"amount": 25.0}), args_hash({"amount": 26.5}))


def test_an_unfinished_run_agrees_up_to_where_it_waits() -> None:
    report = assert_replays(BUNDLES / "order-8-lamps", orders.same, secret_key=KEY)
    assert report.where == (
        "journal end at op-3: next the code asks the decision on approval op-3 of ship (live)"
    )
    with pytest.raises(AssertionError, match=r"journal has  charge\(\{\"amount\":320.0\}\)"):
        assert_replays(BUNDLES / "order-8-lamps", orders.changed, secret_key=KEY)


def test_secret_arguments_need_the_workers_key() -> None:
    with pytest.raises(ConfigError, match="OUTLAST_SECRET_KEY"):
        replay_bundle(BUNDLES / "order-2-books", orders.app)
    wrong = replay_bundle(BUNDLES / "order-2-books", orders.app, secret_key="w" * 32)
    assert wrong.divergence is not None and "secret argument 'api_key'" in wrong.divergence.code
