"""The facts several statements share are said once (migration 0015's functions, 0018's clock,
0023's lease holder), and Postgres inlines each into every statement that calls it: the plan is the
one the fact spelled out had."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
    "outlast_leased",  # 0023_held
    "outlast_held_by",
    "outlast_pauses_of",  # 0035: the pauses that hold a run
)
# The spellings each function replaced: none may come back into store/sql/*.sql.
SPELLED = (
    "'succeeded', 'partial', 'failed', 'timed_out', 'exhausted', 'cancelled'",
    "'queued', 'running', 'waiting', 'awaiting_approval', 'cancelling'",
    "make_interval(secs => 3 * lease_ttl)",
    "SELECT 1 FROM runs w",
    "FROM runs WHERE id = %(id)s AND fencing_token = %(token)s AND state =",
    "IN ('running', 'cancelling')",  # outlast_leased (0023)
    "fencing_token = %(token)s AND state IN",  # outlast_held_by (0023)
    "'pause:run:' ||",  # outlast_pauses_of (0035)
)


def bare(sql: str) -> str:
    """The text with its whitespace made one space, and none beside a parenthesis or a comma: a
    spelling comes back however it is laid out."""
    return re.sub(r" ?([(),]) ?", r"\1", re.sub(r"\s+", " ", sql))


def callers(fn: str) -> list[str]:
    return [name for name, q in Q.items() if re.search(rf"\b{fn}\(", q)]


def test_each_shared_fact_is_said_once() -> None:
    for fn in SHARED:
        assert len(callers(fn)) >= 2, f"{fn} is called by {callers(fn)}"
    for text in SPELLED:
        assert not [name for name, q in Q.items() if bare(text) in bare(q)], text
    # Nor into SQL written elsewhere in the package (the testing kit's clock, say).
    package = Path(__file__).resolve().parents[2] / "outlast"
    for text in SPELLED:
        assert not [p.name for p in package.rglob("*.py") if bare(text) in bare(p.read_text())], text


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


# -- 0023's facts cost the hot path nothing ---------------------------------------------------

# Each 0023 fact as the statements spelled it before (its parameters already $n): a statement with
# them spelled out must plan exactly as it does with the calls.
SPELLED_OUT = (
    (
        r"\boutlast_held_by\(([^,()]+), ([^,()]+), ([^,()]+)\)",
        r"(\1 = \3 AND \2 IN ('running', 'cancelling'))",
    ),
    (r"\boutlast_leased\(([^,()]+)\)", r"(\1 IN ('running', 'cancelling'))"),
)
# Some thousands of runs in every state, three journal entries each, analyzed: the planner chooses
# as it does on a database in use, not as on empty tables.
ROWS = """
INSERT INTO runs (id, workflow, queue, input, input_hash, state, fencing_token, lease_expires_at,
                  journal_len, published_at, tenant)
SELECT 'r' || lpad(i::text, 5, '0'), 'wf', 'q' || mod(i, 4), '{}', 'h',
       (ARRAY['queued', 'running', 'waiting', 'succeeded', 'succeeded', 'failed', 'cancelling',
              'running'])[mod(i, 8) + 1],
       mod(i, 7), now() + interval '30 seconds', 3, now(), CASE WHEN mod(i, 3) = 0 THEN 't' || mod(i, 10) END
FROM generate_series(1, 5000) AS i;
INSERT INTO journal (run_id, seq, kind, body, hash)
SELECT r.id, s, 'step', 'b', 'h' || s FROM runs r, generate_series(1, 3) AS s;
ANALYZE runs;
ANALYZE journal;
"""
# The custom plans' parameters (a held run's, a claim's, an append's); any other is NULL.
SAMPLE = {
    "id": "'r00001'",
    "run_id": "'r00001'",
    "token": "1",
    "ids": "'{r00001}'",
    "tokens": "'{1}'",
    "queue": "'q1'",
    "programs": "'{}'",
    "worker": "'w'",
    "ttl": "30",
    "window": "0",
    "seq": "4",
    "hash": "'h4'",
    "kinds": "'{step}'",
    "op_ids": "'{o}'",
    "bodies": "'{b}'",
    "hashes": "'{h4}'",
    "journal_len": "3",
    "child": "'r00002'",
    "key": "'k'",
    "holder": "'o'",
    "cap": "2",
}


def explain(c: psycopg.Connection[Any], sql: str) -> str:
    """The plan of named-statement text ``sql`` (its ``%(name)s`` made ``$n``), run with SAMPLE."""
    params: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m[1] not in params:
            params.append(m[1])
        return f"${params.index(m[1]) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    c.execute(f"PREPARE q AS {text}".encode())
    args = f"({', '.join(SAMPLE.get(p, 'NULL') for p in params)})" if params else ""
    try:
        return "\n".join(r[0] for r in c.execute(f"EXPLAIN (COSTS OFF, VERBOSE) EXECUTE q{args}".encode()))
    finally:
        c.execute(b"DEALLOCATE q")


def spelled_out(sql: str) -> str:
    """``sql`` with 0023's calls replaced by the conditions they stand for."""
    numbered = re.sub(r"%\((\w+)\)s", lambda m: f"$__{m[1]}__", sql)
    for call, fact in SPELLED_OUT:
        numbered = re.sub(call, fact, numbered)
    return re.sub(r"\$__(\w+)__", r"%(\1)s", numbered)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_the_lease_facts_plan_as_spelled_out_and_claim_and_append_read_by_key(
    world: World, mode: str
) -> None:
    """Every statement calling 0023's functions plans exactly as it does with the facts spelled
    out, under the writer's generic plans and the pool's custom ones; the claim and the fenced
    append, run at every operation, find the run by its primary key, and the append's re-check
    reads one journal partition."""
    world.sql(ROWS)
    names = sorted({name for fn in ("outlast_leased", "outlast_held_by") for name in callers(fn)})
    assert {"claim", "append"} <= set(names), names
    with psycopg.connect(
        world.database_url, autocommit=True, prepare_threshold=None, options=f"-c search_path={world.schema}"
    ) as c:
        c.execute(f"SET plan_cache_mode = {mode}".encode())
        plans = {name: explain(c, Q[name]) for name in names}
        for name in names:
            assert spelled_out(Q[name]) != Q[name], name
            assert plans[name] == explain(c, spelled_out(Q[name])), f"{name} plans otherwise under {mode}"
    runs = rf"Index Scan using runs_pkey on {world.schema}\.runs\b"
    for name in ("claim", "append"):
        assert re.search(runs, plans[name]), f"{name} under {mode}:\n{plans[name]}"
        assert not re.search(r"Seq Scan on \S+\.runs\b", plans[name]), f"{name} under {mode}:\n{plans[name]}"
    partitions = set(re.findall(r"Scan (?:Backward )?using \S+ on \S+\.(journal_p\d+)", plans["append"]))
    if mode == "force_custom_plan":
        assert len(partitions) == 1, f"append reads journal partitions {partitions}:\n{plans['append']}"
    else:  # pruned when the generic plan starts, its run id known
        assert "Subplans Removed: 15" in plans["append"], plans["append"]


# Pauses of runs, workflows and queues, analyzed, one of them holding the sample run's queue.
PAUSES = """
INSERT INTO pauses (scope, target, why)
SELECT (ARRAY['run', 'workflow', 'queue'])[mod(i, 3) + 1], 't' || i, 'w' FROM generate_series(1, 3000) AS i;
INSERT INTO pauses (scope, target, why) VALUES ('queue', 'q1', 'incident');
ANALYZE pauses;
"""


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
def test_claim_and_renew_read_the_pauses_that_hold_a_run_by_its_primary_key(world: World, mode: str) -> None:
    """``outlast_pauses_of`` (0035), inlined into the claim and the renewal (each run at every
    claim and every heartbeat), finds a run's pauses by the primary key of ``pauses``, never by a
    scan of the table; and the claim reads each run's pauses once."""
    world.sql(ROWS + PAUSES)
    with psycopg.connect(
        world.database_url, autocommit=True, prepare_threshold=None, options=f"-c search_path={world.schema}"
    ) as c:
        c.execute(f"SET plan_cache_mode = {mode}".encode())
        for name in ("claim", "renew"):
            plan = explain(c, Q[name])
            probes = re.findall(r"Index (?:Only )?Scan (?:using|on) pauses_pkey\b", plan)
            assert len(probes) == 3, f"{name} under {mode}: {probes}\n{plan}"  # its run, workflow, queue
            assert not re.search(r"Seq Scan on \S+\.pauses\b", plan), f"{name} under {mode}:\n{plan}"
            assert "outlast_pauses_of" not in plan, f"{name}: not inlined under {mode}:\n{plan}"


LISTING = ("runs_page", "runs_order_", "runs_after_", "runs_where_")  # listing.py's pieces


def test_every_statement_prepares(world: World) -> None:
    """Each named statement parses and plans on the schema: one that does not would show, when the
    writer runs it, as an outage retried, not as the error it is. The run listing's pieces are left
    to the test of its indexes, which plans each page as ``store/listing.py`` composes it."""
    refused = {}
    with psycopg.connect(
        world.database_url, autocommit=True, prepare_threshold=None, options=f"-c search_path={world.schema}"
    ) as c:
        for name, sql in Q.items():
            if name.startswith(LISTING):
                continue
            params: list[str] = []

            def number(m: re.Match[str], params: list[str] = params) -> str:
                if m[1] not in params:
                    params.append(m[1])
                return f"${params.index(m[1]) + 1}"

            text = re.sub(r"%\((\w+)\)s", number, sql)
            try:
                c.execute(f"PREPARE q AS {text}".encode())
                c.execute(b"DEALLOCATE q")
            except psycopg.Error as exc:
                refused[name] = str(exc).splitlines()[0]
    assert not refused, refused
