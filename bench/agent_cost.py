"""What outlast adds to an agent run, beside the same agent run without outlast, for each agent
framework outlast integrates (``--framework``): a pydantic-ai agent (``outlast.agents``), an
OpenAI Agents SDK agent (``outlast.integrations.openai_agents``) and a LangGraph graph
(``outlast.integrations.langgraph``), each with a scripted model that answers at once. A step is
two operations: one model request and one read tool call (for LangGraph, the graph's "model" node,
and the call of ``step`` by its "tools" node, a ``ToolNode``). For each:

- **worker CPU per step** of 10-step agent runs, the worker process's user+sys CPU over the runs,
  against the CPU the same agent takes per step run plainly in one process (``agent.run_sync``,
  ``Runner.run``, ``graph.invoke``: no outlast);
- **the resume of a 200-step agent run**: reading its journal and replaying it (what a worker that
  takes the run over does before it goes live: ``outlast._replay.replay_run``), in ms, against the
  time the plain agent takes to run 200 steps.

    OUTLAST_DATABASE_URL=postgresql://... OUTLAST_REDIS_URL=redis://... python3 bench/agent_cost.py

Each figure is the median of ``--rounds``; the ratio is outlast's over the plain agent's. It needs
``outlast[agents,openai-agents,langgraph]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from agents import Agent as SdkAgent, RunConfig, Runner, function_tool
from agents.items import ModelResponse as SdkResponse
from agents.models.interface import Model
from agents.usage import Usage
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool as lc_tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from outlast import App, Run
from outlast.agents import OutlastDurability, run_agent
from outlast.integrations.langgraph import DurableGraph
from outlast.integrations.openai_agents import DurableAgent

app = App()


def step(i: int) -> int:
    """A read that answers at once."""
    return i + 1


# pydantic-ai: a FunctionModel


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


def plain_pydantic_ai(n: int) -> None:
    assert plain.run_sync(str(n), usage_limits=UNLIMITED).output == "done"


# The OpenAI Agents SDK: a scripted Model


class StepModel(Model):
    """N steps: each a call of ``step``, then the answer (the prompt is N)."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> SdkResponse:
        done = sum(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input)
        usage = Usage(requests=1, input_tokens=1, output_tokens=1, total_tokens=2)
        if done + 1 < int(input[0]["content"]):
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"c{done}", name="step", arguments=json.dumps({"i": done})
            )
            return SdkResponse(output=[call], usage=usage, response_id=None)
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        message = ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed", content=[text]
        )
        return SdkResponse(output=[message], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


sdk_agent = SdkAgent(name="steps", model=StepModel(), tools=[function_tool(step)])
sdk_durable = DurableAgent(app, "sdk", sdk_agent, tools={"step": "read"})
NO_TRACING = RunConfig(tracing_disabled=True)


@app.workflow("sdk_steps")
async def sdk_steps(run: Run, prompt: str) -> str:
    result = await sdk_durable.run(run, prompt, run_config=NO_TRACING, max_turns=int(prompt) + 1)
    return str(result.final_output)


def plain_openai_agents(n: int) -> None:
    result = asyncio.run(Runner.run(sdk_agent, str(n), run_config=NO_TRACING, max_turns=n + 1))
    assert result.final_output == "done"


# LangGraph: a "model" node (a chat model) and a "tools" node (a ToolNode calling step) a step


class StepChatModel(BaseChatModel):
    """N steps: each a call of ``step``, then the answer (the first message is N)."""

    @property
    def _llm_type(self) -> str:
        return "steps"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        done = sum(isinstance(m, AIMessage) for m in messages)
        if done + 1 < int(str(messages[0].content)):
            answer = AIMessage("", tool_calls=[{"name": "step", "args": {"i": done}, "id": f"c{done}"}])
        else:
            answer = AIMessage("done")
        return ChatResult(generations=[ChatGeneration(message=answer)])


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


chat_model = StepChatModel()


def call_model(state: Chat) -> dict[str, Any]:
    return {"messages": [chat_model.invoke(state["messages"])]}


builder = StateGraph(Chat)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode([lc_tool(step)]))
builder.add_edge(START, "model")
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
graph = builder.compile()
graph_durable = DurableGraph(app, "graph", graph, nodes={"model": "read"}, tools={"step": "read"})


def graph_config(n: int) -> Any:
    return {"recursion_limit": 2 * n + 5}  # two supersteps a step


@app.workflow("graph_steps")
async def graph_steps(run: Run, prompt: str) -> str:
    state = await graph_durable.run(run, {"messages": [HumanMessage(prompt)]}, graph_config(int(prompt)))
    return str(state["messages"][-1].content)


def plain_langgraph(n: int) -> None:
    state = graph.invoke({"messages": [HumanMessage(str(n))]}, graph_config(n))
    assert state["messages"][-1].content == "done"


# framework -> (its workflow, its plain run of n steps)
FRAMEWORKS: dict[str, tuple[str, Callable[[int], None]]] = {
    "pydantic-ai": ("steps", plain_pydantic_ai),
    "openai-agents": ("sdk_steps", plain_openai_agents),
    "langgraph": ("graph_steps", plain_langgraph),
}


def plain_cpu_per_step(plain_run: Callable[[int], None], runs: int, n: int) -> float:
    started = time.process_time()
    for _ in range(runs):
        plain_run(n)
    return (time.process_time() - started) / (runs * n)


def plain_ms(plain_run: Callable[[int], None], n: int) -> float:
    started = time.perf_counter()
    plain_run(n)
    return (time.perf_counter() - started) * 1e3


def pid_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def outlast_cpu_per_step(h: Any, workflow: str, runs: int, n: int) -> float:
    """Worker CPU per step over ``runs`` runs, in a worker process of its own (its start left out)."""
    env = h._process_env()
    worker = subprocess.Popen(
        [sys.executable, "-m", "outlast", "worker", "agent_cost:app", "-q", h.settings.queue],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        warm = h.client.enqueue(workflow, {"prompt": "2"})  # the worker up, its imports done
        assert h.client.wait(warm.id, timeout=60).state == "succeeded"
        before = pid_cpu(worker.pid)
        ids = [h.client.enqueue(workflow, {"prompt": str(n)}).id for _ in range(runs)]
        for run_id in ids:
            assert h.client.wait(run_id, timeout=120).state == "succeeded"
        return (pid_cpu(worker.pid) - before) / (runs * n)
    finally:
        worker.terminate()
        worker.wait(30)


def resume_ms(h: Any, workflow: str, n: int, rounds: int) -> tuple[float, int]:
    """A finished n-step run's journal read and replayed, as a worker taking it over does."""
    from outlast._replay import replay_run

    run = h.client.enqueue(workflow, {"prompt": str(n)})
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


def measure(h: Any, framework: str, runs: int, rounds: int) -> None:
    workflow, plain_run = FRAMEWORKS[framework]
    cpu = [
        (outlast_cpu_per_step(h, workflow, runs, 10), plain_cpu_per_step(plain_run, runs, 10))
        for _ in range(rounds)
    ]
    resume, entries = resume_ms(h, workflow, 200, rounds)
    base = statistics.median(plain_ms(plain_run, 200) for _ in range(rounds))
    ours, theirs = statistics.median(c for c, _ in cpu), statistics.median(p for _, p in cpu)
    print(f"{framework}:")
    print(
        f"  worker CPU per step, 10-step runs: outlast {ours * 1e6:.0f} us, plain agent {theirs * 1e6:.0f} us"
    )
    print(f"    ratio {statistics.median(c / p for c, p in cpu):.2f}x (median of {rounds} rounds)")
    print(
        f"  resume of a 200-step run ({entries} journal entries): {resume:.0f} ms;"
        f" the plain run: {base:.0f} ms"
    )
    print(f"    ratio {resume / base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=[*FRAMEWORKS, "all"], default="all")
    parser.add_argument("--runs", type=int, default=30, help="10-step runs measured per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from outlast.testing import Harness

    db, rd = os.environ["OUTLAST_DATABASE_URL"], os.environ["OUTLAST_REDIS_URL"]
    import agent_cost  # the app as the worker process imports it

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with Harness.create(agent_cost.app, db, rd) as h:
        for framework in FRAMEWORKS if args.framework == "all" else [args.framework]:
            measure(h, framework, args.runs, args.rounds)
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
