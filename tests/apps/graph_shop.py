"""The LangGraph test world: a compiled graph of three plain Python nodes, run durably by the
workflow ``orders`` (outlast.integrations.langgraph.DurableGraph): look the order up (a read),
charge it (idempotent: the bank's ``charges`` keeps one charge per idempotency key), tell the
customer (plain: one row of ``emails`` a run). Each node also counts its every run in ``effects``.
The tables are the test's own schema's, so a worker process killed mid-run leaves them to be
counted.

The workflow ``reviewed`` runs the graph with a ``review`` node between the lookup and the charge,
which asks a person (LangGraph's ``interrupt()``) and goes on with their answer: a durable request
of the run, answered with ``client.respond``; the workflow ``typed`` asks the same with a typed answer
(``interrupts=``), an ``Approval``.

The workflow ``told`` runs the graph with an ``explain`` node between the lookup and the charge,
which writes a custom stream chunk and asks a fake chat model (streamed token by token), with
LangGraph's stream modes sent to the run's live readers. The workflow ``fanned`` runs the
explanation beside a ``score`` node, two branches of the same step, streamed likewise."""

from __future__ import annotations

import asyncio
import itertools
import operator
from typing import Annotated, Any, TypedDict

import pydantic
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from outlast import App, Run, current_action
from outlast.integrations.langgraph import DurableGraph
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, node text NOT NULL,
    key text NOT NULL);
CREATE TABLE IF NOT EXISTS charges (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
CREATE TABLE IF NOT EXISTS emails (id serial PRIMARY KEY, run_id text NOT NULL, body text NOT NULL);
"""


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


class Order(TypedDict):
    order_id: str
    amount: int
    log: Annotated[list[str], operator.add]


def _effect(node: str, statement: str = "", args: tuple[Any, ...] = ()) -> None:
    """Count the node's run, and make its effect in the world (``statement`` with ``args``)."""
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO effects (run_id, node, key) VALUES (%s, %s, %s)", (a.run_id, node, a.idempotency_key)
        )
        if statement:
            c.execute(statement, args)


def lookup(state: Order) -> dict[str, Any]:
    _effect("lookup")
    return {"amount": 30, "log": [f"found {state['order_id']}"]}


def charge(state: Order) -> dict[str, Any]:
    insert = "INSERT INTO charges (key, order_id, amount) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
    _effect("charge", insert, (current_action().idempotency_key, state["order_id"], state["amount"]))
    return {"log": [f"charged {state['amount']}"]}


async def notify(state: Order) -> dict[str, Any]:
    _effect(
        "notify", "INSERT INTO emails (run_id, body) VALUES (%s, %s)", (current_action().run_id, "charged")
    )
    return {"log": ["notified"]}


def review(state: Order) -> dict[str, Any]:
    _effect("review")  # runs again when answered: LangGraph runs a node again from its start
    answer = interrupt({"order_id": state["order_id"], "amount": state["amount"]})
    return {"log": [f"approved by {answer['by']}"]}


class Approval(pydantic.BaseModel):
    """The answer a typed review asks for (``interrupts=``): who approved, and up to what amount."""

    by: str
    up_to: int


def typed_review(state: Order) -> dict[str, Any]:
    answer = interrupt({"order_id": state["order_id"], "amount": state["amount"]})
    assert isinstance(answer, Approval), answer  # validated, and given as the model
    return {"log": [f"approved by {answer.by} up to {answer.up_to}"]}


CHAT = GenericFakeChatModel(messages=itertools.cycle([AIMessage("charging your order now")]))


async def explain(state: Order) -> dict[str, Any]:
    _effect("explain")
    get_stream_writer()({"explaining": state["order_id"]})
    said = await CHAT.ainvoke(f"explain the charge of {state['order_id']}")
    return {"log": [str(said.content)]}


async def score(state: Order) -> dict[str, Any]:
    """Run beside ``explain`` (the same step): it ends a second after the explanation's run began,
    once that node's update has been streamed."""
    _effect("score")
    run_id = current_action().run_id
    while not _ran("explain", run_id):
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    return {"log": ["scored"]}


def _ran(node: str, run_id: str) -> bool:
    with connect() as c:
        found = c.execute("SELECT 1 FROM effects WHERE run_id = %s AND node = %s", (run_id, node)).fetchall()
    return bool(found)


def build(*path: tuple[str, Any]) -> StateGraph[Order]:
    builder = StateGraph(Order)
    names = []
    for name, fn in path:
        builder.add_node(name, fn)
        names.append(name)
    for a, b in zip([START, *names], [*names, END], strict=True):
        builder.add_edge(a, b)
    return builder


app = App()
orders = DurableGraph(
    app,
    "orders",
    build(("lookup", lookup), ("charge", charge), ("notify", notify)).compile(),
    nodes={"lookup": "read", "charge": "idempotent"},
)
reviewed = DurableGraph(
    app,
    "reviewed",
    build(("lookup", lookup), ("review", review), ("charge", charge)).compile(),
    nodes={"lookup": "read", "review": "read", "charge": "idempotent"},
)

told = DurableGraph(
    app,
    "told",
    build(("lookup", lookup), ("explain", explain), ("charge", charge)).compile(),
    nodes={"lookup": "read", "charge": "idempotent"},
)


typed = DurableGraph(
    app,
    "typed",
    build(("lookup", lookup), ("review", typed_review), ("charge", charge)).compile(),
    nodes={"lookup": "read", "review": "read", "charge": "idempotent"},
    interrupts={"review": Approval},
)

fanned_builder = StateGraph(Order)
for _name, _fn in (("lookup", lookup), ("explain", explain), ("score", score), ("charge", charge)):
    fanned_builder.add_node(_name, _fn)
fanned_builder.add_edge(START, "lookup")
fanned_builder.add_edge("lookup", "explain")  # explain and score: two branches of one step
fanned_builder.add_edge("lookup", "score")
fanned_builder.add_edge(["explain", "score"], "charge")
fanned_builder.add_edge("charge", END)
fanned = DurableGraph(
    app,
    "fanned",
    fanned_builder.compile(),
    nodes={"lookup": "read", "score": "read", "charge": "idempotent"},
)


@app.workflow("orders", version="1")
async def orders_workflow(run: Run, order_id: str) -> dict[str, Any]:
    return dict(await orders.run(run, {"order_id": order_id, "log": []}))


@app.workflow("reviewed", version="1")
async def reviewed_workflow(run: Run, order_id: str) -> dict[str, Any]:
    return dict(await reviewed.run(run, {"order_id": order_id, "log": []}))


@app.workflow("told", version="1")
async def told_workflow(run: Run, order_id: str) -> dict[str, Any]:
    state = await told.run(
        run, {"order_id": order_id, "log": []}, stream_mode=["updates", "custom", "messages"]
    )
    return dict(state)


@app.workflow("typed", version="1")
async def typed_workflow(run: Run, order_id: str) -> dict[str, Any]:
    return dict(await typed.run(run, {"order_id": order_id, "log": []}))


@app.workflow("fanned", version="1")
async def fanned_workflow(run: Run, order_id: str) -> dict[str, Any]:
    state = await fanned.run(
        run, {"order_id": order_id, "log": []}, stream_mode=["updates", "custom", "messages"]
    )
    return dict(state)
