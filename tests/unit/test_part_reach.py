"""What a part of the worker can reach of the store: the families it is given (``store.leases``,
``store.journal``...), read from the annotations of its constructor. A part is given the families
it uses, never the whole store; only the parts that build others are given the store, each with its
reason here. The length of a class body is ``test_rooms.py``'s; this measures its doors."""

from __future__ import annotations

import ast
from pathlib import Path

from outlast.store import FAMILIES

WORKER = Path(__file__).resolve().parents[2] / "outlast" / "worker"
FAMILY_TYPES = {kind.__name__: name for name, kind in FAMILIES.items()} | {"CaptureReader": "journal"}
MAX_FAMILIES = 5  # the most a part is given; a part that needs more owns too much
# The parts given the whole store, and why: each builds the parts below it, with their families.
COMPOSERS = {
    "Worker": "builds the worker's parts (claims, heartbeat, sweeper, linger) and closes the store",
    "Claims": "builds each run's Execution",
    "Execution": "ends the run (leases, children, journal) and builds its Run",
    "take": "builds a run's writes and gate once, when a worker takes it",
    "Run": "builds the run's parts (waits, requests, children, first, dispatcher)",
    "Sweeper": "builds its Scheduler and Rollup",
    "_close": "closes the store the pool opened (the store's own door, no family)",
}


def reach() -> dict[str, set[str]]:
    """Each part (a class's ``__init__``, or a module's function) and the families it is given;
    ``{"*"}`` for the whole store."""
    found: dict[str, set[str]] = {}
    for path in sorted(WORKER.glob("*.py")):
        tree = ast.parse(path.read_text())
        doors: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                doors += [
                    (node.name, f)
                    for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name == "__init__"
                ]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                doors.append((node.name, node))
        for name, fn in doors:
            given = set()
            for a in (*fn.args.args, *fn.args.kwonlyargs):
                kind = a.annotation.id if isinstance(a.annotation, ast.Name) else None
                if kind == "Store":
                    given.add("*")
                elif kind in FAMILY_TYPES:
                    given.add(FAMILY_TYPES[kind])
            if given:
                found[name] = given
    return found


def test_only_the_parts_that_build_others_are_given_the_whole_store() -> None:
    whole = {part for part, given in reach().items() if "*" in given}
    assert whole == set(COMPOSERS), f"given the whole store, not its families: {whole - set(COMPOSERS)}"


def test_every_other_part_is_given_a_few_families() -> None:
    wide = {p: g for p, g in reach().items() if "*" not in g and len(g) > MAX_FAMILIES}
    assert not wide, f"more than {MAX_FAMILIES} families: {wide}"


def test_the_heartbeat_reaches_its_leases_and_the_fleet_only() -> None:
    parts = reach()
    assert parts["Heartbeat"] == {"leases", "fleet"}
    assert parts["JournalWrites"] == {"journal", "messages"}  # the run's one way into its journal
    assert parts["Rollup"] == {"rollups"}
    assert len(parts) >= 15, sorted(parts)  # the measure found the parts (a rename would hide them)
