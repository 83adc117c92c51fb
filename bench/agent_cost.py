"""What outlast adds to a pydantic-ai agent run (outlast.agents), beside the same agent run without
outlast, with a ``FunctionModel`` that answers at once:

- **worker CPU per step** of 10-step agent runs (a step: one model request and one read tool call),
  the worker process's user+sys CPU over the runs, against the CPU the same agent takes per step
  run plainly in one process (``agent.run``, no outlast);
- **the resume of a 200-step agent run**: reading its journal and replaying it (what a worker that
  takes the run over does before it goes live: ``outlast._replay.replay_run``), in ms, against the
  time the plain agent takes to run 200 steps.

    OUTLAST_DATABASE_URL=postgresql://... OUTLAST_REDIS_URL=redis://... python3 bench/agent_cost.py

Each figure is the median of ``--rounds``; the ratio is outlast's over the plain agent's. It needs
``outlast[agents]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from outlast import App, Run
from outlast.agents import OutlastDurability, run_agent

app = App()


def steps_asked(messages: list[ModelMessage]) -> int:
    first = messages[0]
    prompt = next(p for p in getattr(first, "parts", ()) if isinstance(p, UserPromptPart))
    return int(str(prompt.content))


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """N steps: each a call of ``step``, then the answer (the prompt is N)."""
    done = sum(isinstance(m, ModelResponse) for m in messages)
    if done + 1 < steps_asked(messages):
        return ModelResponse([ToolCallPart("step", {"i": done}, f"c{done}")])
    return ModelResponse([TextPart("done")])


def step(i: int) -> int:
    """A read that answers at once."""
    return i + 1


plain = Agent(FunctionModel(model), name="plain", tools=[step])
durable = Agent(
    FunctionModel(model),
    name="steps",
    tools=[step],
    capabilities=[OutlastDurability(app, tools={"step": "read"})],
)
UNLIMITED = UsageLimits(request_limit=None)


@app.workflow("steps")
async def steps(run: Run, prompt: str) -> str:
    result = await run_agent(run, durable, prompt, usage_limits=UNLIMITED)
    return str(result.output)


def plain_cpu_per_step(runs: int, n: int) -> float:
    started = time.process_time()
    for _ in range(runs):
        assert plain.run_sync(str(n), usage_limits=UNLIMITED).output == "done"
    return (time.process_time() - started) / (runs * n)


def plain_ms(n: int) -> float:
    started = time.perf_counter()
    assert plain.run_sync(str(n), usage_limits=UNLIMITED).output == "done"
    return (time.perf_counter() - started) * 1e3


def pid_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def outlast_cpu_per_step(h: Any, runs: int, n: int) -> float:
    """Worker CPU per step over ``runs`` runs, in a worker process of its own (its start left out)."""
    env = h._process_env()
    worker = subprocess.Popen(
        [sys.executable, "-m", "outlast", "worker", "agent_cost:app", "-q", h.settings.queue],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        warm = h.client.enqueue("steps", {"prompt": "2"})  # the worker up, its imports done
        assert h.client.wait(warm.id, timeout=60).state == "succeeded"
        before = pid_cpu(worker.pid)
        ids = [h.client.enqueue("steps", {"prompt": str(n)}).id for _ in range(runs)]
        for run_id in ids:
            assert h.client.wait(run_id, timeout=120).state == "succeeded"
        return (pid_cpu(worker.pid) - before) / (runs * n)
    finally:
        worker.terminate()
        worker.wait(30)


def resume_ms(h: Any, n: int, rounds: int) -> tuple[float, int]:
    """A finished n-step run's journal read and replayed, as a worker taking it over does."""
    from outlast._replay import replay_run

    run = h.client.enqueue("steps", {"prompt": str(n)})
    h.start_worker()
    assert h.wait(run.id, timeout=300).state == "succeeded"
    h.stop_worker()
    times, entries = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        record = h.client.status(run.id)
        journal = h.client.journal(run.id)
        report = asyncio.run(replay_run(app, record, journal))
        times.append((time.perf_counter() - started) * 1e3)
        assert report.verdict == "agrees", report
        entries = len(journal)
    return statistics.median(times), entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="10-step runs measured per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from outlast.testing import Harness

    db, rd = os.environ["OUTLAST_DATABASE_URL"], os.environ["OUTLAST_REDIS_URL"]
    import agent_cost  # the app as the worker process imports it

    with Harness.create(agent_cost.app, db, rd) as h:
        cpu = [
            (outlast_cpu_per_step(h, args.runs, 10), plain_cpu_per_step(args.runs, 10))
            for _ in range(args.rounds)
        ]
        resume, entries = resume_ms(h, 200, args.rounds)
    base = statistics.median(plain_ms(200) for _ in range(args.rounds))
    ours, theirs = statistics.median(c for c, _ in cpu), statistics.median(p for _, p in cpu)
    print(
        f"worker CPU per step, 10-step runs: outlast {ours * 1e6:.0f} us, plain agent {theirs * 1e6:.0f} us"
    )
    print(f"  ratio {statistics.median(c / p for c, p in cpu):.2f}x (median of {args.rounds} rounds)")
    print(
        f"resume of a 200-step run ({entries} journal entries): {resume:.0f} ms; the plain run: {base:.0f} ms"
    )
    print(f"  ratio {resume / base:.2f}x")


if __name__ == "__main__":
    main()
