"""What a long agent run costs on outlast (outlast.agents), beside the same agent run plainly: a
pydantic-ai agent whose ``FunctionModel`` asks, at each of N steps, for a read tool returning about
4 KB of text (a page), then answers.

- **stored bytes**: the run's journal (its text, and on disk after TOAST), its captures' share, in
  total and per step at steps 100, 400 and 1000 (the journal up to that step's capture, over the
  step; and the last ten steps' own); a step's bytes by entry kind; the payload store's; what
  Postgres holds for the run (the journal's and payloads' tables grown over the run: rows, TOAST,
  indexes); the content the tool returned, and captures withheld;
- **worker CPU per step** at step 10 and at step N (the ten steps around each), outlast's worker
  process against the same agent run plainly in this process: the model marks the process's CPU
  time at every request;
- **wall**: the run from enqueue to its end, against the plain run;
- **resume**: the run's journal read as a worker reads it at a resume (``journal_to_replay``) and
  replayed (``replay_run``); outlast's part of it (the read, the chain's check and the index, and
  the operations the agent hands to outlast, served from the journal), the rest being the agent's
  own loop (pydantic-ai's graph and history handling, which grow with the square of the steps).

    OUTLAST_DATABASE_URL=postgresql://... OUTLAST_REDIS_URL=redis://... \\
        python3 bench/long_agent.py --steps 400

It needs ``outlast[agents]``; one run each, so compare the columns, not the milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from outlast import App, Run
from outlast.agents import OutlastDurability, run_agent

PAGE = 4096
MARKS: list[float] = []  # the process's CPU time at each model request
UNLIMITED = UsageLimits(request_limit=None)


WORDS = (
    "the of and to in is for on that by with as from at an be this which or are it model run agent".split()
)


def page(i: int) -> str:
    """``PAGE`` bytes of text, page ``i``'s own: words and numbers drawn at random (seeded), which
    compress about as prose does."""
    r = random.Random(i)
    words = [f"page {i}:"]
    while sum(map(len, words)) + len(words) < PAGE:
        words.append(r.choice(WORDS) if len(words) % 4 else str(r.randrange(10**6)))
    return " ".join(words)[:PAGE]


def model(messages: list[ModelMessage], info: AgentInfo | None) -> ModelResponse:
    """N steps (the prompt is N): each a call of ``read_page``, then the answer."""
    MARKS.append(time.process_time())
    first = next(p for p in getattr(messages[0], "parts", ()) if isinstance(p, UserPromptPart))
    done = (len(messages) - 1) // 2
    if done < int(str(first.content)):
        return ModelResponse([ToolCallPart("read_page", {"i": done}, f"c{done}")])
    marks = os.environ.get("LONG_AGENT_MARKS")
    if marks:
        Path(marks).write_text(json.dumps(MARKS))
    return ModelResponse([TextPart("done")])


def read_page(i: int) -> str:
    """Read page ``i``."""
    return page(i)


app = App()
plain = Agent(FunctionModel(model), name="plain", tools=[read_page])
durable = Agent(
    FunctionModel(model),
    name="long",
    tools=[read_page],
    capabilities=[OutlastDurability(app, tools={"read_page": "read"})],
)


@app.workflow("long")
async def long(run: Run, prompt: str) -> str:
    return str((await run_agent(run, durable, prompt, usage_limits=UNLIMITED)).output)


def per_step(marks: list[float], at: int) -> float:
    """CPU seconds per step over the ten steps that end at step ``at``."""
    at = min(at, len(marks) - 1)
    lo = max(at - 10, 0)
    return (marks[at] - marks[lo]) / (at - lo)


def run_plain(agent: Agent[Any, Any], n: int) -> tuple[float, list[float]]:
    MARKS.clear()
    started = time.perf_counter()
    assert agent.run_sync(str(n), usage_limits=UNLIMITED).output == "done"
    return time.perf_counter() - started, list(MARKS)


def run_outlast(h: Any, n: int, marks: Path, warmed: Any = None) -> tuple[str, float, list[float]]:
    """One n-step run in a worker process of its own: its id, wall seconds and CPU marks
    (``warmed``: called once the worker is warm, before the run)."""
    env = h._process_env(LONG_AGENT_MARKS=str(marks))
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    worker = subprocess.Popen(
        [sys.executable, "-m", "outlast", "worker", "long_agent:app", "-q", h.settings.queue],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        warm = h.client.enqueue("long", {"prompt": "2"})  # the worker up, its imports done
        assert h.client.wait(warm.id, timeout=60).state == "succeeded"
        if warmed is not None:
            warmed()
        started = time.perf_counter()
        run = h.client.enqueue("long", {"prompt": str(n)})
        assert h.client.wait(run.id, timeout=3600).state == "succeeded"
        return run.id, time.perf_counter() - started, json.loads(marks.read_text())
    finally:
        worker.terminate()
        worker.wait(30)


STORED = """
SELECT seq, kind, octet_length(body) AS text, pg_column_size(body) AS disk,
       kind = 'capture' AND body::jsonb ? 'withheld' AS withheld
FROM {schema}.journal WHERE run_id = %s ORDER BY seq
"""


PAYLOADS = "SELECT count(*), coalesce(sum(size), 0) FROM {schema}.payloads WHERE run_id = %s"

# The journal's partitions and the payloads' table as Postgres keeps them: rows, TOAST, indexes.
ON_DISK = """
SELECT coalesce(sum(pg_relation_size(c.oid)), 0),
       coalesce(sum(pg_total_relation_size(c.reltoastrelid)) FILTER (WHERE c.reltoastrelid <> 0), 0),
       coalesce(sum(pg_indexes_size(c.oid)), 0)
FROM pg_class c
WHERE c.oid = '{schema}.payloads'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{schema}.journal'::regclass)
"""


def on_disk(h: Any) -> tuple[int, int, int]:
    """Bytes of the journal's and payloads' tables: rows, TOAST, indexes."""
    with psycopg.connect(h.database_url) as conn:
        row = conn.execute(ON_DISK.format(schema=h.settings.schema)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def stored(h: Any, run_id: str, marks: tuple[int, ...]) -> dict[str, Any]:
    with psycopg.connect(h.database_url) as conn:
        rows = conn.execute(STORED.format(schema=h.settings.schema), (run_id,)).fetchall()
        payloads = conn.execute(PAYLOADS.format(schema=h.settings.schema), (run_id,)).fetchone()
    kinds: dict[str, list[int]] = {}
    for r in rows:
        k = kinds.setdefault(r[1], [0, 0, 0])
        k[0], k[1], k[2] = k[0] + 1, k[1] + r[2], k[2] + r[3]
    captures = [i for i, r in enumerate(rows) if r[1] == "capture"]
    upto: dict[int, dict[str, float]] = {}
    for step in marks:
        if step <= len(captures):
            end = captures[step - 1]
            lo = captures[max(step - 11, 0)]
            text = sum(r[2] for r in rows[: end + 1])
            upto[step] = {
                "text": text / step,
                "disk": sum(r[3] for r in rows[: end + 1]) / step,
                "last10": sum(r[2] for r in rows[lo + 1 : end + 1]) / (step - max(step - 11, 0) - 1 or 1),
            }
    return {
        "text": sum(r[2] for r in rows),
        "disk": sum(r[3] for r in rows),
        "captures": sum(r[2] for r in rows if r[1] == "capture"),
        "withheld": sum(bool(r[4]) for r in rows),
        "entries": len(rows),
        "kinds": kinds,
        "payloads": (int(payloads[0]), int(payloads[1])) if payloads else (0, 0),
        "per_step": upto,
    }


async def resume(h: Any, run_id: str) -> dict[str, float]:
    """Seconds to read the journal as a resume does, and to replay it; and of the replay, the
    seconds spent in outlast's part: checking and indexing the journal, and each operation the
    agent hands to outlast (``_Bound.__call__``: served from the journal, the model and the tools
    not called) -- the rest is the agent's own loop."""
    from outlast import AsyncClient, agents
    from outlast._replay import replay_run
    from outlast.worker import executor

    spent = {"ops": 0.0, "check": 0.0}
    call, check = agents._Bound.__call__, executor.first_bad_crossing

    async def timed(self: Any, params: Any, *, config: object | None = None) -> Any:
        started = time.perf_counter()
        try:
            return await call(self, params, config=config)
        finally:
            spent["ops"] += time.perf_counter() - started

    async with AsyncClient(settings=h.settings) as c:
        record = await c.status(run_id)
        started = time.perf_counter()
        entries = await c.store.journal.journal_to_replay(run_id)
        read = time.perf_counter() - started
        agents._Bound.__call__ = timed  # type: ignore[method-assign]
        try:
            started = time.perf_counter()
            report = await replay_run(app, record, entries)
            replay = time.perf_counter() - started
        finally:
            agents._Bound.__call__ = call  # type: ignore[method-assign]
        assert report.verdict == "agrees", report
        started = time.perf_counter()
        check(entries, record.journal_head)
        executor.Journaled(entries)
        spent["check"] = time.perf_counter() - started
    return {"read": read, "replay": replay, "entries": len(entries), **spent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="the agent's steps (default 1000)")
    parser.add_argument("--no-plain", action="store_true", help="outlast's run only (no CPU, wall)")
    args = parser.parse_args()
    n = args.steps
    from outlast.testing import Harness

    db, rd = os.environ["OUTLAST_DATABASE_URL"], os.environ["OUTLAST_REDIS_URL"]
    import long_agent  # the app as the worker process imports it

    plain_wall, plain_marks = run_plain(long_agent.plain, n) if not args.no_plain else (0.0, [])
    with Harness.create(long_agent.app, db, rd) as h:
        marks_file = Path(h.settings.schema + ".marks.json").absolute()
        disk: list[tuple[int, int, int]] = []
        try:
            rid, wall, worker_marks = run_outlast(h, n, marks_file, lambda: disk.append(on_disk(h)))
        finally:
            marks_file.unlink(missing_ok=True)
        disk.append(on_disk(h))
        size = stored(h, rid, (100, 200, 400, 1000))
        r = asyncio.run(resume(h, rid))
    content = n * PAGE
    print(f"{n} steps, {content / 1e6:.2f} MB of content returned ({PAGE} bytes a step)")
    print(
        f"stored: journal {size['text'] / 1e6:.2f} MB ({size['text'] / content:.2f}x content), "
        f"on disk {size['disk'] / 1e6:.2f} MB, captures {size['captures'] / 1e6:.2f} MB; "
        f"{size['entries']} entries; captures withheld: {size['withheld']}"
    )
    before, after = disk
    grown = [a - b for a, b in zip(after, before, strict=True)]
    print(
        f"held by Postgres (journal and payloads tables grown over the run): {sum(grown) / 1e6:.2f} MB "
        f"({sum(grown) / content:.2f}x content, {sum(grown) / n / 1e3:.1f} KB a step): rows "
        f"{grown[0] / 1e6:.2f} MB, TOAST {grown[1] / 1e6:.2f} MB, indexes {grown[2] / 1e6:.2f} MB; "
        f"payload store {size['payloads'][0]} values, {size['payloads'][1] / 1e6:.2f} MB"
    )
    for kind, (count, text, kdisk) in size["kinds"].items():
        print(
            f"  {kind}: {count} entries, {text / n / 1e3:.2f} KB a step as text, "
            f"{kdisk / n / 1e3:.2f} KB after TOAST ({text / content:.2f}x content)"
        )
    for step, s in size["per_step"].items():
        print(
            f"  per step up to step {step}: {s['text'] / 1e3:.1f} KB ({s['disk'] / 1e3:.1f} KB on disk); "
            f"the ten steps before it: {s['last10'] / 1e3:.1f} KB a step"
        )
    for at in (10, n) if plain_marks else ():
        ours, theirs = per_step(worker_marks, at), per_step(plain_marks, at)
        print(
            f"worker CPU per step at step {at}: outlast's worker {ours * 1e3:.2f} ms, plain "
            f"{theirs * 1e3:.2f} ms, outlast's part {(ours - theirs) * 1e3:.2f} ms"
        )
    if plain_marks:
        print(f"wall: outlast {wall:.1f} s, plain {plain_wall:.1f} s ({wall / plain_wall:.2f}x)")
    else:
        print(f"wall: outlast {wall:.1f} s")
    ours = r["read"] + r["check"] + r["ops"]  # the check and index: measured apart, once more
    loop = r["replay"] - r["ops"] - r["check"]
    print(
        f"resume ({r['entries']:.0f} entries): journal read {r['read'] * 1e3:.0f} ms + replay "
        f"{r['replay'] * 1e3:.0f} ms = {(r['read'] + r['replay']) * 1e3:.0f} ms; outlast's part "
        f"{ours * 1e3:.0f} ms (read {r['read'] * 1e3:.0f}, chain and index {r['check'] * 1e3:.0f}, "
        f"operations served {r['ops'] * 1e3:.0f}), the agent's own loop {loop * 1e3:.0f} ms"
    )


if __name__ == "__main__":
    import long_agent  # one module: the plain agent marks the MARKS the figures read

    long_agent.main()
