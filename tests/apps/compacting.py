"""A reading agent whose history is compacted by a summary the model writes: once ``AT`` pages
are read, ``Summarizing`` (a capability) asks for compaction before the next request and has the
conversation's own model summarise the history. The summary is a model request like any
other, so outlast journals it and a resume serves it from the journal. ``SUMMARIES`` counts the
summaries the model wrote; ``reading`` runs it, then waits on ``go`` (its worker let go) and answers
a second prompt in the same conversation, replaying the first past its compaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent, RunContext, models
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.compaction import CompactionRequest, CompactionResult
from pydantic_ai.messages import (
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import UsageLimits

from outlast import App, Run
from outlast.agents import OutlastDurability, read, run_agent

models.ALLOW_MODEL_REQUESTS = False

AT = 3  # the read that asks for compaction
SUMMARIES: list[str] = []
UNLIMITED = UsageLimits(request_limit=None)
ASK = "summarise: "


def _asked(messages: list[ModelMessage]) -> int:
    """How many reads the latest prompt (or the summary standing for it) asked for."""
    asked = 0
    for m in messages:
        for p in m.parts:
            if isinstance(p, UserPromptPart) or (isinstance(p, CompactionPart) and p.content):
                asked = int(str(p.content).rsplit(" ", 1)[-1])
    return asked


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    first = messages[0].parts[0] if messages and messages[0].parts else None
    if isinstance(first, UserPromptPart) and str(first.content).startswith(ASK):  # a summary asked
        SUMMARIES.append(str(first.content))
        return ModelResponse([TextPart(f"read pages so far; asked {str(first.content).rsplit(' ', 1)[-1]}")])
    calls = [p for m in messages if isinstance(m, ModelResponse) for p in m.tool_calls]
    step = calls[-1].args_as_dict()["step"] + 1 if calls else 0
    if step < _asked(messages):
        return ModelResponse([ToolCallPart("read_page", {"step": step}, f"c{step}")])
    return ModelResponse([TextPart("done")])


def read_page(step: int) -> str:
    """Read the ``step``-th page."""
    return f"page {step}: " + "the quick brown fox jumps over the lazy dog. " * 40


@dataclass
class Summarizing(AbstractCapability[Any]):
    """Compaction by a summary the conversation's own model writes (a model request), asked for
    before the request that follows the ``AT``-th read (run-level code: replayed as it ran)."""

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        returns = [p for m in request_context.messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns and returns[-1].content.startswith(f"page {AT}:"):
            ctx.request_compaction()
        return request_context

    async def compact_history(
        self, ctx: RunContext[Any], request: CompactionRequest
    ) -> CompactionResult | None:
        conv = request.conversation_request
        asked = _asked(request.messages)
        ask = ModelRequest([UserPromptPart(f"{ASK}{len(request.messages)} messages; asked {asked}")])
        summary = await conv.model.request([ask], conv.settings, conv.parameters)
        part = CompactionPart(summary.text)
        kept = request.messages[-2:]  # the last call and its return
        return CompactionResult(
            messages=[ModelRequest([part]), *kept], part=part, handler="summarizing", kept_from=1
        )


app = App()
agent = Agent(
    FunctionModel(model),
    name="compacter",
    tools=[read_page],
    capabilities=[Summarizing(), OutlastDurability(app, tools={"read_page": read()})],
)


@app.workflow("reading")
async def reading(run: Run, steps: int, then: int = 0) -> str:
    result = await run_agent(run, agent, str(steps), usage_limits=UNLIMITED)
    if then:
        await run.receive("go")
        result = await run_agent(
            run, agent, str(then), message_history=result.all_messages(), usage_limits=UNLIMITED
        )
    return str(result.output)
