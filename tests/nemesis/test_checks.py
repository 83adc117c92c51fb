"""The nemesis's checks (no server), each fed a history that breaks its guarantee: a message taken
twice, out of order or never; a spend the ledger does not hold; an in-doubt operation outside every
fault window. Each must fail, and pass on the true history."""

from __future__ import annotations

from tests.nemesis.checks import Window, budget_spent, delays, in_doubt_windows, messages_taken, slowed

CHAT = {"r1": 2}  # two messages from each producer
TAKEN = [("r1", "op-1", 0, 0), ("r1", "op-2", 1, 0), ("r1", "op-3", 0, 1), ("r1", "op-4", 1, 1)]


def test_messages_taken_once_in_order_pass() -> None:
    assert messages_taken(CHAT, TAKEN, {"r1": 4}) == []


def test_a_message_taken_twice_fails() -> None:
    twice = [*TAKEN, ("r1", "op-5", 1, 1)]
    assert any("taken more than once" in v for v in messages_taken(CHAT, twice, {"r1": 5}))


def test_a_message_taken_out_of_order_or_never_fails() -> None:
    swapped = [("r1", "op-1", 0, 1), ("r1", "op-2", 1, 0), ("r1", "op-3", 0, 0), ("r1", "op-4", 1, 1)]
    assert any("in the order [1, 0]" in v for v in messages_taken(CHAT, swapped, {"r1": 4}))
    lost = messages_taken(CHAT, TAKEN[:3], {"r1": 3})
    assert any("never taken" in v for v in lost) and any("3 messages journaled" in v for v in lost)


def test_a_spend_the_ledger_does_not_hold_fails() -> None:
    assert budget_spent({"b1": 30.0, "b2": 5.0}, {"b1": 30.0, "b2": 5.0}) == []
    wrong = budget_spent({"b1": 60.0}, {"b1": 30.0})
    assert wrong == ["budget b1: outlast recorded 60 spent, the ledger holds 30"]
    assert budget_spent({}, {"b1": 30.0})  # a transfer with no spend recorded


def test_an_in_doubt_operation_names_its_window_or_fails() -> None:
    windows = [Window("kill", "nem-a", 110.0, 112.0), Window("pg_restart", "postgres", 130.0, 133.0)]
    lines, bad = in_doubt_windows([("r1", "op-2", 111.0, 115.0)], windows, 100.0)
    assert bad == [] and lines == ["r1 op-2: in kill@nem-a [+10.0s, +12.0s]"]
    lines, bad = in_doubt_windows([("r1", "op-2", 120.0, 125.0)], windows, 100.0)
    assert lines == ["r1 op-2: in NO fault window"] and len(bad) == 1


def test_figures_of_takeovers_and_slowed_runs() -> None:
    assert delays({"kill": [2.0, 3.0, 9.0]}) == {"kill": "3 runs, median 3.0s, p90 9.0s, max 9.0s"}
    windows = [Window("kill", "nem-a", 10.0, 12.0), Window("migrate", "postgres", 20.0, 22.0)]
    assert slowed([(9.0, 11.0), (13.0, 14.0), (11.0, 21.0)], windows) == {"kill": 2, "migrate": 1}
