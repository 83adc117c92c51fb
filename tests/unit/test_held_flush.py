"""Held results: every fenced write the worker makes for a run goes through ``JournalWrites.fenced``,
which writes the run's held entries first; the journal's own appends carry them in their
statement. Read from the source, so that a write path added later without the flush fails here."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from pathlib import Path

from outlast.store import FAMILIES, Store
from outlast.store.queries import Q

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
    "await_message",
    "set_aside",
    "await_request",
    "publish_request",
    "publish_approval",
    "withdraw_requests",
    "withdraw_approvals",
    "wait_first",
    "release",
    "park_paused",  # an operator's pause: the run waits (or is queued, its pause lifted meanwhile)
    "carry",  # the end of a generation: chained, as "finish", on the journal as the worker chained it
}
# Token-keyed, yet not a step of the run: giving slots back (a held result lost after it is
# redone, and takes its slot again), and an operator's resume of a waiting run (the producer's,
# keyed by the token of the wait it saw: no worker holds the run then), as a worker's move of a
# parked run is (mover.py).
# The lease holder's look at its inbox is a read (whether the token still holds the run, beside the
# oldest message): its take is the journal append below that carries it.
NOT_STEPS = {"release_slots", "requeue", "inbox"}
# The journal's one way in (the lease holder's, queued at once, is ``submit_append``): an append
# carries the held entries in its own statement. The worker appends in one place only.
JOURNAL = {"append", "submit_append", "submit_take"}  # a take: an append that takes a message
WORKER_APPENDS = {"submit_append", "submit_take"}
# Every other store method the worker reaches, none a step of the run under its token: reads; the
# worker's own records and the sweeper's and scheduler's writes (no run held); an event row; a
# settlement (keyed by the operation, in the commit of its result's append); a refusal of a run not
# claimed; the wake-up of another run (a parent).
UNFENCED = {
    # reads
    "approval", "budget", "budget_standing", "request", "cutoff", "db_now", "due", "get_run",
    "journal", "journal_to_replay", "captures", "program_served", "redis_used", "run_gauges", "schedules",
    "unseen", "workers", "pause_of", "parked",
    "unknown_workflows", "orphans", "movable", "whole_record", "whole", "whole_and_text",
    # the worker's, the sweeper's and the scheduler's (no run held; claim makes the token)
    "open", "close", "hurry", "claim", "renew", "beat_programs", "declare_channels", "beat_worker",
    "forget_worker", "forget_gone_workers", "forget_served_programs", "forget_watchers", "expire_deadlines",
    "wake_child_waiters", "wake_first_waiters", "turns", "prune", "advance_schedule", "sweep_payloads",
    # a value stored in the payload store before the entry that refers to it (an orphan is swept)
    "put_payloads",
    # an artifact's index row, written after its bytes and before the crossing or result that
    # follows it is journaled: keyed by (run, operation, name), the same row from any worker
    "put_artifact",
    "declare_schedule", "insert_run", "rollup_turn", "roll_up", "flush_latencies", "rollup_queue_names",
    # of the run, not a step under its token, or of another run (the size warning: once per run,
    # by whichever statement finds it unmarked, worker/size.py)
    "event", "settle", "refuse_program", "wake_parent", "submit_size_warning",
    # the listening connection of the receives that linger (worker/linger.py), the schema that
    # names their channels, and how they hear (for its log line): LISTEN, no write
    "listener", "schema", "wakeups",
}  # fmt: skip
FIGURES = {"writer.busy"}  # not a method: read for the metrics, the only use of these attributes


# What a part is given of the store: a family, or the protocol a fake stands in for one (captures).
FAMILY_TYPES = {kind.__name__ for kind in FAMILIES.values()} | {"CaptureReader"}


def _methods() -> list[tuple[str, object]]:
    """Every function of the store and of its families."""
    return [m for kind in (Store, *FAMILIES.values()) for m in inspect.getmembers(kind, inspect.isfunction)]


def _token_writes() -> set[str]:
    """Every store method that takes the lease holder's token: a fenced write."""
    found = set()
    for name, fn in _methods():
        params = inspect.signature(fn).parameters
        if "token" in params or "author" in params:
            found.add(name)
    return found


def _statement_named(node: ast.AST) -> str | None:
    """The statement a node names: ``self._write("x", ...)`` (``_submit``, ``_rows``, ``_beat_rows``)
    or ``Q["x"]``."""
    what: ast.AST | None = None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        if node.func.attr in ("_write", "_submit", "_rows", "_beat_rows"):
            what = node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Q":
        what = node.slice
    if isinstance(what, ast.Constant) and what.value in Q:
        return str(what.value)
    return None


def _statements_of_store() -> dict[str, set[str]]:
    """Each store method, and the named statements (``store/sql/*.sql``) it runs."""
    found: dict[str, set[str]] = {}
    for name, fn in _methods():
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        named = {n for node in ast.walk(tree) if (n := _statement_named(node)) is not None}
        if named:
            found[name] = named
    return found


def _is_store(node: ast.expr) -> bool:
    """``x.store``, ``x._store`` or a name ``store``: the worker's ways to its whole store (a part
    that builds others)."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("store", "_store")
    return isinstance(node, ast.Name) and node.id == "store"


def _family_holders(tree: ast.AST) -> set[str]:
    """The ``self`` attributes that hold a family of the store in this module: assigned from a
    parameter typed by a family (in its function), or from ``store.<family>``."""
    held: set[str] = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = {
            a.arg
            for a in (*fn.args.args, *fn.args.kwonlyargs)
            if isinstance(a.annotation, ast.Name) and a.annotation.id in FAMILY_TYPES
        }
        for node in ast.walk(fn):
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=True))
                for t, v in pairs:
                    if isinstance(t, ast.Attribute) and (
                        (isinstance(v, ast.Name) and v.id in params)
                        or (isinstance(v, ast.Attribute) and _is_store(v.value) and v.attr in FAMILIES)
                    ):
                        held.add("self." + t.attr)
    return held


@functools.cache
def _held() -> set[str]:
    """The worker's attributes that hold a family (a subclass reads its base's: ``Inbox``)."""
    return set().union(*(_family_holders(ast.parse(p.read_text())) for p in WORKER.glob("*.py")))


def _family_names(tree: ast.AST) -> set[int]:
    """The ids of the names that are a parameter typed by a family, where its function reads it."""
    found = set()
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            params = {
                a.arg
                for a in (*fn.args.args, *fn.args.kwonlyargs)
                if isinstance(a.annotation, ast.Name) and a.annotation.id in FAMILY_TYPES
            }
            found |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in params}
    return found


def _is_family(node: ast.expr, held: set[str], names: set[int]) -> bool:
    """A family of the store: ``store.leases``, a parameter typed by one, or an attribute the
    module holds one in."""
    if isinstance(node, ast.Attribute) and _is_store(node.value) and node.attr in FAMILIES:
        return True
    if isinstance(node, ast.Name):
        return id(node) in names
    return (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and f"self.{node.attr}" in held
    )


def _store_uses(tree: ast.AST, held: set[str]) -> list[tuple[ast.Attribute, str]]:
    """Every method of the store (its own, or a family's) the code names, called there or not;
    ``held``: the module's holders of a family."""
    names = _family_names(tree)
    return [
        (node, node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and not node.attr.startswith("__")
        and (_is_family(node.value, held, names) or (_is_store(node.value) and node.attr not in FAMILIES))
    ]


def _store_calls(tree: ast.AST, held: set[str]) -> list[tuple[ast.Call, str]]:
    uses = {id(node): method for node, method in _store_uses(tree, held)}
    return [
        (node, uses[id(node.func)])
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and id(node.func) in uses
    ]


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


def test_every_statement_fenced_by_the_token_is_classified() -> None:
    """Read from the SQL, not the methods' signatures: every statement that takes the fencing token
    (``%(token)s``) is run only by a method classified here, whatever its parameters are named."""
    by_token = {name for name, sql in Q.items() if "%(token)s" in sql}
    runs = _statements_of_store()
    running = {method for method, names in runs.items() if names & by_token}
    assert by_token <= set().union(*runs.values()), "a fenced statement run by no method found here"
    assert running <= FENCED | NOT_STEPS | JOURNAL, running - (FENCED | NOT_STEPS | JOURNAL)


def test_every_store_method_the_worker_reaches_is_classified() -> None:
    """A store method new to the worker (a write, or a read) must be put in one class above: a write
    of the run made outside ``fenced`` is found here even when the store's part of it (like a
    reservation) is not keyed by the token. And the store is reached only by its attribute (or a
    name ``store``): no other name holds it, where a call would go unseen."""
    known = FENCED | NOT_STEPS | JOURNAL | UNFENCED
    for path in sorted(WORKER.glob("*.py")):
        tree = ast.parse(path.read_text())
        figures = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and f"{node.value.attr}.{node.attr}" in FIGURES
        }
        for node, method in _store_uses(tree, _held()):
            assert method in known or id(node) in figures, (
                f"{path.name}:{node.lineno} store.{method} is not classified here"
            )
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and _is_store(node.value):
                assert all(isinstance(t, ast.Attribute) and _is_store(t) for t in node.targets), (
                    f"{path.name}:{node.lineno} the store held by another name: {ast.unparse(node)}"
                )


def test_every_fenced_write_of_the_worker_flushes_first() -> None:
    seen: set[str] = set()
    for path in sorted(WORKER.glob("*.py")):
        tree = ast.parse(path.read_text())
        held = _held()
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.AsyncFunctionDef | ast.FunctionDef):
                continue
            calls, names = _fenced_args(fn)
            assigned = {
                id(n.value): n.targets[0].id
                for n in ast.walk(fn)
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
            }
            called = {id(call.func) for call, _m in _store_calls(fn, held)}
            for node, method in _store_uses(fn, held):  # a fenced write is only ever called, in place
                assert method not in FENCED or id(node) in called, f"{path.name}:{node.lineno} {method}"
            for call, method in _store_calls(fn, held):
                where = f"{path.name}:{call.lineno} {method}"
                if method in JOURNAL:
                    assert (path.name, fn.name) == ("writes.py", "_submit") and method in WORKER_APPENDS, (
                        f"{where}: append outside the run's journal writes (writes.py)"
                    )
                    seen.add(method)
                elif method in FENCED:
                    assert id(call) in calls or assigned.get(id(call)) in names, (
                        f"{where}: not through fenced()"
                    )
                    seen.add(method)
    assert seen == FENCED | WORKER_APPENDS  # every one of them is made somewhere, and was looked at


def test_the_failpoints_name_the_held_points() -> None:
    from outlast import _failpoints as failpoints

    assert {"with_result_held", "after_fenced_write"} <= failpoints.POINTS
