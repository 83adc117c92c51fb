"""An OpenAI Agents SDK agent run durably by outlast: each model call and each tool call an
operation of the run, so a resumed run is served the model's answers from the journal and never
refunds twice.

The agent looks the order up (a read) and refunds it (idempotent: the payment service keeps one
refund per idempotency key). Its model here is a scripted ``Model`` (the SDK's own interface: no API
key, no network); give the agent ``model="gpt-5"`` instead to ask OpenAI. Run a worker, then this
module::

    outlast worker examples.openai_agents_refund:app
    python -m examples.openai_agents_refund
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, RunConfig, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)

from outlast import App, Client, Run, current_action
from outlast.integrations.openai_agents import DurableAgent

app = App()
refunds: dict[str, int] = {}  # the payment service: it honours idempotency keys


class RefundModel(Model):
    """A scripted model: look the order up, refund it, then say so."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        done = [i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"]
        usage = Usage(requests=1, input_tokens=20, output_tokens=10, total_tokens=30)
        if len(done) < 2:
            name, arguments = (
                ("lookup_order", {"order_id": "A1"}) if not done else ("refund", {"order_id": "A1"})
            )
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"call-{len(done)}", name=name, arguments=json.dumps(arguments)
            )
            return ModelResponse(output=[call], usage=usage, response_id=None)
        text = ResponseOutputText(
            type="output_text", text="Your order A1 is refunded: 30 EUR.", annotations=[]
        )
        message = ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=usage, response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The same answer streamed: its text word by word, then the completed response."""
        output = (await self.get_response(system_instructions, input)).output
        texts = [part.text for item in output for part in getattr(item, "content", None) or []]
        for n, word in enumerate(" ".join(texts).split(" ") if texts else []):
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta",
                delta=word if n == 0 else " " + word,
                item_id="m",
                output_index=0,
                content_index=0,
                logprobs=[],
                sequence_number=n,
            )
        response = Response(
            id="r",
            created_at=0,
            model="refund",
            object="response",
            output=output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=999)


@function_tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "amount": 30}


@function_tool
def refund(order_id: str) -> str:
    """Refund an order in full."""
    refunds.setdefault(current_action().idempotency_key, 30)  # a repeat refunds nothing
    return "refunded 30"


agent = Agent(
    name="support",
    instructions="Refund what the customer asks for.",
    model=RefundModel(),
    tools=[lookup_order, refund],
)
support = DurableAgent(app, "support", agent, tools={"lookup_order": "read", "refund": "idempotent"})


@app.workflow("support")
async def support_run(run: Run, message: str) -> str:
    result = await support.run(run, message, run_config=RunConfig(tracing_disabled=True))
    return str(result.final_output)


if __name__ == "__main__":
    with Client.from_env(app=app) as client:
        run = client.enqueue("support", {"message": "Please refund order A1."})
        print(client.wait(run.id, timeout=60).result)
