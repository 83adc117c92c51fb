"""A LangGraph graph run durably by outlast: each node an operation of the run, its state update
journaled, so a resumed run replays the nodes that finished and runs the rest.

The graph looks an order up (a read), asks a chat model to draft the customer's answer (here
langchain-core's fake chat model: no API key, no network), and refunds the order (idempotent: the
payment service keeps one refund per idempotency key). Run a worker, then this module::

    outlast worker examples.langgraph_refund:app
    python -m examples.langgraph_refund
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from outlast import App, Client, Run, current_action
from outlast.integrations.langgraph import DurableGraph

app = App()
refunds: dict[str, int] = {}  # the payment service: it honours idempotency keys
model = FakeMessagesListChatModel(responses=[AIMessage("Your order A1 is refunded: 30 EUR.")])


class Refund(TypedDict):
    order_id: str
    amount: int
    messages: Annotated[list[AnyMessage], add_messages]


def lookup(state: Refund) -> dict[str, Any]:
    return {"amount": 30}


def draft(state: Refund) -> dict[str, Any]:
    return {"messages": [model.invoke(state["messages"])]}


def refund(state: Refund) -> dict[str, Any]:
    refunds.setdefault(current_action().idempotency_key, state["amount"])  # a repeat refunds nothing
    return {}


builder = StateGraph(Refund)
builder.add_node("lookup", lookup)
builder.add_node("draft", draft)
builder.add_node("refund", refund)
builder.add_edge(START, "lookup")
builder.add_edge("lookup", "draft")
builder.add_edge("draft", "refund")
builder.add_edge("refund", END)
graph = DurableGraph(
    app, "refund", builder.compile(), nodes={"lookup": "read", "draft": "read", "refund": "idempotent"}
)


@app.workflow("refund")
async def refund_run(run: Run, order_id: str, message: str) -> dict[str, Any]:
    state = await graph.run(run, {"order_id": order_id, "messages": [HumanMessage(message)]})
    return {"amount": state["amount"], "answer": state["messages"][-1].content}


if __name__ == "__main__":
    with Client.from_env(app=app) as client:
        run = client.enqueue("refund", {"order_id": "A1", "message": "Please refund order A1."})
        print(client.wait(run.id, timeout=60).result)
