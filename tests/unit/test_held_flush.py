"""Held results: every fenced write the worker makes for a run goes through ``RunControl.fenced``,
which writes the run's held entries first; the journal's own appends carry them in their
statement. Read from the source, so that a write path added later without the flush fails here."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from outlast.store import Store

WORKER = Path(__file__).resolve().parents[2] / "outlast" / "worker"

# The store's writes fenced by the run's token that carry no journal entry: each must be awaited
# through ``fenced`` (the held entries written first).
FENCED = {
    "finish",
    "wait",
    "park",
    "acquire_slot",
    "reserve",
    "insert_child",
    "wait_child",
    "await_approval",
    "release",
}
# Token-keyed, yet not a step of the run: giving slots back (a held result lost after it is
# redone, and takes its slot again).
NOT_STEPS = {"release_slots"}
JOURNAL = {"append"}  # the journal's one way in: carries the held entries in its own statement


def _token_writes() -> set[str]:
    """Every store method that takes the lease holder's token: a fenced write."""
    found = set()
    for name, fn in inspect.getmembers(Store, inspect.iscoroutinefunction):
        params = inspect.signature(fn).parameters
        if "token" in params or "author" in params:
            found.add(name)
    return found


def _store_calls(tree: ast.AST) -> list[tuple[ast.Call, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Attribute) and owner.attr in ("store", "_store"):
                out.append((node, node.func.attr))
    return out


def _fenced_args(fn: ast.AST) -> tuple[set[int], set[str]]:
    """The calls and the names passed as the write to ``fenced(what, write)`` in ``fn``."""
    calls, names = set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fenced":
            assert len(node.args) == 2, ast.unparse(node)
            arg = node.args[1]
            if isinstance(arg, ast.Name):
                names.add(arg.id)
            else:
                calls.add(id(arg))
    return calls, names


def test_every_token_write_is_classified() -> None:
    """A new fenced write in the store must say how it treats held results."""
    # (a budget reservation is keyed by the operation, not the token: flushed before all the same)
    assert _token_writes() == (FENCED - {"reserve"}) | NOT_STEPS | JOURNAL


def test_every_fenced_write_of_the_worker_flushes_first() -> None:
    seen: set[str] = set()
    for path in sorted(WORKER.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            calls, names = _fenced_args(fn)
            assigned = {
                id(n.value): n.targets[0].id
                for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
            }
            for call, method in _store_calls(fn):
                where = f"{path.name}:{call.lineno} {method}"
                if method in JOURNAL:
                    assert (path.name, fn.name) == ("replayer.py", "_commit"), (
                        f"{where}: append outside the replayer"
                    )
                    seen.add(method)
                elif method in FENCED:
                    assert id(call) in calls or assigned.get(id(call)) in names, (
                        f"{where}: not through fenced()"
                    )
                    seen.add(method)
    assert seen == FENCED | JOURNAL  # every one of them is made somewhere, and was looked at


def test_the_failpoints_name_the_held_points() -> None:
    from outlast import failpoints

    assert {"with_result_held", "after_fenced_write"} <= failpoints.POINTS
