"""A reading agent: each step its ``FunctionModel`` asks for ``read_page``, a read returning
``PAGE`` bytes of text, until the number of steps the latest prompt asked for is done.
``reading`` runs it; ``then`` > 0: it then waits for a message on ``go`` (its worker let go) and
carries the same conversation on for ``then`` more steps. ``trimming`` is the same agent with a
history processor that keeps the prompt and the last four messages. ``SEEN`` holds, when
``RECORD`` is set, what the model received at each request, as JSON."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, models
from pydantic_ai.capabilities.process_history import ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from outlast import App, Run
from outlast.agents import OutlastDurability, read, run_agent

models.ALLOW_MODEL_REQUESTS = False

PAGE = 2048
RECORD = False
SEEN: list[Any] = []
UNLIMITED = UsageLimits(request_limit=None)


def page(i: int) -> str:
    """A page of ``PAGE`` bytes, different for each ``i``."""
    line = f"page {i}: the quick brown fox jumps over the lazy dog. "
    return (line * (PAGE // len(line) + 1))[:PAGE]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if RECORD:
        SEEN.append(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))
    asked = last = 0
    for i, m in enumerate(messages):
        if isinstance(m, ModelRequest) and any(isinstance(p, UserPromptPart) for p in m.parts):
            prompt = next(p for p in m.parts if isinstance(p, UserPromptPart))
            asked, last = int(str(prompt.content)), i
    # the latest call says which step of this prompt it was (a trimmed history keeps it)
    calls = [p for m in messages[last:] if isinstance(m, ModelResponse) for p in m.tool_calls]
    step = calls[-1].args_as_dict()["step"] + 1 if calls else 0
    if step < asked:
        answered = sum(isinstance(m, ModelResponse) for m in messages)
        n = calls[-1].args_as_dict()["i"] + 1 if calls else answered
        return ModelResponse([ToolCallPart("read_page", {"i": n, "step": step}, f"c{n}")])
    return ModelResponse([TextPart("done")])


def read_page(i: int, step: int) -> str:
    """Read page ``i`` (the ``step``-th read for the prompt)."""
    return page(i)


def trim(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The prompt and the last four messages (whole tool call and return pairs)."""
    return messages if len(messages) <= 5 else [messages[0], *messages[-4:]]


app = App()
agent = Agent(
    FunctionModel(model),
    name="reader",
    tools=[read_page],
    capabilities=[OutlastDurability(app, tools={"read_page": read()})],
)
trimming = Agent(
    FunctionModel(model),
    name="trimmer",
    tools=[read_page],
    capabilities=[ProcessHistory(trim), OutlastDurability(app, tools={"read_page": read()})],
)


@app.workflow("reading")
async def reading(run: Run, steps: int, then: int = 0, trimmed: bool = False) -> str:
    chosen = trimming if trimmed else agent
    result = await run_agent(run, chosen, str(steps), usage_limits=UNLIMITED)
    if then:
        await run.receive("go")
        result = await run_agent(
            run, chosen, str(then), message_history=result.all_messages(), usage_limits=UNLIMITED
        )
    return str(result.output)
