"""The facts several statements share are said once (migration 0015's functions), and Postgres
inlines each into every statement that calls it: the plan is the one the fact spelled out had."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from outlast.store.queries import Q
from tests.conftest import World

SHARED = (
    "outlast_final",
    "outlast_unfinished",
    "outlast_live",
    "outlast_window",
    "outlast_redone",
    "outlast_now",  # 0018_clock
)
# The spellings each function replaced: none may come back into store/sql/*.sql.
SPELLED = (
    "'succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled'",
    "'queued', 'running', 'waiting', 'awaiting_approval', 'cancelling'",
    "make_interval(secs => 3 * lease_ttl)",
    "SELECT 1 FROM runs w",
    "FROM runs WHERE id = %(id)s AND fencing_token = %(token)s AND state =",
)


def callers(fn: str) -> list[str]:
    return [name for name, q in Q.items() if re.search(rf"\b{fn}\(", q)]


def test_each_shared_fact_is_said_once() -> None:
    for fn in SHARED:
        assert len(callers(fn)) >= 2, f"{fn} is called by {callers(fn)}"
    for text in SPELLED:
        assert not [name for name, q in Q.items() if text in q], text
    # Nor into SQL written elsewhere in the package (the testing kit's clock, say).
    package = Path(__file__).resolve().parents[2] / "outlast"
    for text in SPELLED:
        assert not [p.name for p in package.rglob("*.py") if text in p.read_text()], text


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_shared_facts_are_inlined_in_every_plan(world: World, mode: str) -> None:
    """The writer's generic plans and the pool's custom ones: no call is left in a plan (a call
    Postgres does not inline is planned and run as a function of its own, per row)."""
    names = sorted({name for fn in SHARED for name in callers(fn)})
    with psycopg.connect(
        world.database_url, autocommit=True, prepare_threshold=None, options=f"-c search_path={world.schema}"
    ) as c:
        c.execute(f"SET plan_cache_mode = {mode}".encode())
        for name in names:
            params: list[str] = []

            def number(m: re.Match[str], params: list[str] = params) -> str:
                if m[1] not in params:
                    params.append(m[1])
                return f"${params.index(m[1]) + 1}"

            text = re.sub(r"%\((\w+)\)s", number, Q[name])
            c.execute(f"PREPARE q AS {text}".encode())
            args = f"({', '.join(['NULL'] * len(params))})" if params else ""
            plan = "\n".join(r[0] for r in c.execute(f"EXPLAIN (VERBOSE) EXECUTE q{args}".encode()))
            c.execute(b"DEALLOCATE q")
            left = [fn for fn in SHARED if fn in plan]
            assert not left, f"{name}: {left} not inlined under {mode}:\n{plan}"
            if mode == "force_generic_plan" and re.search(r"\boutlast_now\(", Q[name]):
                # the clock's one-row table is read in InitPlans (once a statement), never per row
                under = clock_reads(plan)
                assert under and set(under) == {"InitPlan"}, f"{name}: the clock is read {under}:\n{plan}"


def clock_reads(plan: str) -> list[str]:
    """For each scan of the clock table in a plan, what it runs under: "InitPlan" (once a
    statement), "SubPlan" (once per outer row) or "" (the statement's own plan)."""
    lines = plan.splitlines()
    found = []
    for i, line in enumerate(lines):
        if not re.search(r"Scan on \S+\.clock\b", line):
            continue
        indent, kind = len(line) - len(line.lstrip()), ""
        for above in reversed(lines[:i]):
            depth = len(above) - len(above.lstrip())
            if depth < indent and re.match(r"\s*(InitPlan|SubPlan|->)", above):
                indent = depth
                if m := re.match(r"\s*(InitPlan|SubPlan)", above):
                    kind = m[1]
                    break
        found.append(kind)
    return found
