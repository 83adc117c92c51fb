"""A fork: "the charge was right, the email was wrong". A payment finished (a charge, an email); a
fork from the email's operation serves the charge from the copied journal (no second charge, its
key kept) and sends the email again under the fork's own key, on a real worker. Effects counted in
the world. A fork past an operation left open is refused."""

from __future__ import annotations

import pytest

from outlast import Client
from outlast.errors import InvalidInput
from tests.conftest import World

pytestmark = pytest.mark.crash
APP = "tests.apps.buggy:app"


def _effects(world: World, order: str) -> list[str]:
    return [r[0] for r in world.sql("SELECT what FROM executions WHERE run_id = %s ORDER BY id", order)]


def test_a_fork_after_the_charge_charges_once_and_sends_a_new_email(world: World) -> None:
    world.worker(APP, BUGGY_FIXED="1")
    with Client(settings=world.settings()) as c:
        c.enqueue("pay", {"order": "o1", "cents": 500}, run_id="o1", tenant="acme", budget={"usd": 5})
        assert c.wait("o1", timeout=30).state == "succeeded"
        forked = world.cli("fork", "o1", "--from", "op-2", "--run-id", "o1-fix")
        assert forked.returncode == 0 and "forked from o1 at op-2" in forked.stdout, forked.stderr
        done = c.wait("o1-fix", timeout=30)
        original = c.status("o1")
        again = c.fork("o1", from_op="op-2", run_id_new="o1-fix")  # asked again: the same fork
        fork_events = [e["kind"] for e in c.events("o1-fix")]
        original_events = [(e["kind"], e["detail"].get("as")) for e in c.events("o1")]
    assert done.state == "succeeded", (done.state, done.reason)
    assert (done.parent_id, done.tenant, done.budget_id) == ("o1", "acme", original.budget_id)
    assert again.id == "o1-fix"
    assert "forked_from" in fork_events and ("forked", "o1-fix") in original_events
    effects = _effects(world, "o1")
    charges = [e for e in effects if e.startswith("charge:")]
    emails = [e for e in effects if e.startswith("email:")]
    assert charges == ["charge:o1:op-1"]  # one charge in the world: the fork's was served, key kept
    assert emails == ["email:o1:op-2", "email:o1-fix:op-2"]  # the fork's email is new: its own key
    status = world.cli("status", "o1-fix").stdout
    assert "forked from o1 at op-2" in status, status


def test_a_fork_is_refused_where_its_journal_would_leave_an_operation_open(world: World) -> None:
    with Client(settings=world.settings()) as c:
        c.enqueue("pay", {"order": "o2", "cents": 5}, run_id="o2")
        with pytest.raises(InvalidInput, match="no operation 'op-9'"):
            c.fork("o2", from_op="op-9")
