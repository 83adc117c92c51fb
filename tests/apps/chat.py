"""The world of the message tests (tests/integration/test_messages.py, tests/crash/test_messages_crash.py,
tests/faults/test_message_load.py): runs that take messages and act on each with an idempotent tool.

Every effect lands in the test's own schema (the worker gets ``OUTLAST_DATABASE_URL`` and
``OUTLAST_SCHEMA``):

- ``handled``: one row per message acted on, unique by the tool's idempotency key (a repeat with
  the same key has no second effect, as the tool promises);
- ``dispatches``: one row per dispatch of the tool (a repeat would show here, not in ``handled``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from outlast import App, current_action
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS handled (key text PRIMARY KEY, run_id text NOT NULL, op_id text NOT NULL,
    n integer NOT NULL, message jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS dispatches (id serial PRIMARY KEY, run_id text NOT NULL, key text NOT NULL);
"""

app = App()


class Reply(BaseModel):
    text: str
    score: int = 0


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


@app.tool(idempotent=True)
def handle(n: int, message: Any) -> int:
    """Act on one message: once per idempotency key, however often it is dispatched."""
    a = current_action()
    from psycopg.types.json import Jsonb

    with connect() as c:
        c.execute("INSERT INTO dispatches (run_id, key) VALUES (%s, %s)", (a.run_id, a.idempotency_key))
        c.execute(
            "INSERT INTO handled (key, run_id, op_id, n, message) VALUES (%s, %s, %s, %s, %s) "
            "ON CONFLICT (key) DO NOTHING",
            (a.idempotency_key, a.run_id, a.operation_id, n, Jsonb(message)),
        )
    return n


@app.workflow("converse")
async def converse(run: Any, turns: int = 1, channel: str = "in") -> list[Any]:
    """Take ``turns`` messages on ``channel``, acting on each."""
    got = []
    for n in range(turns):
        message = await run.receive(channel)
        await run.call(handle, n=n, message=message)
        got.append(message)
    return got


@app.workflow("patient")
async def patient(run: Any, timeout: float = 1.0) -> Any:
    """One message, or None once ``timeout`` seconds pass."""
    return {"got": await run.receive("in", timeout=timeout)}


@app.workflow("two")
async def two(run: Any) -> list[Any]:
    """A message on ``b`` first, then one on ``a``: channels are separate inboxes."""
    b = await run.receive("b")
    a = await run.receive("a")
    return [b, a]


@app.workflow("support", channels={"reply": Reply, "count": int})
async def support(run: Any) -> dict[str, Any]:
    """Typed channels: the reply is a ``Reply``."""
    reply = await run.receive("reply")
    assert isinstance(reply, Reply)
    count = await run.receive("count")
    return {"text": reply.text, "score": reply.score, "count": count}


@app.workflow("support_or_timer", channels={"reply": Reply})
async def support_or_timer(run: Any) -> Any:
    """The first of a typed reply and an hour's timer: the reply, as its JSON."""
    won = await run.first(run.receive("reply"), run.sleep(3600))
    return won.value.model_dump() if won.which == 0 else None


@app.workflow("hook")
async def hook(run: Any, expires_in: float = 3600.0) -> Any:
    """A callback URL, shown as the run's first message to the world, then its delivery."""
    url = await run.callback("paid", expires_in=expires_in)
    await run.call(handle, n=0, message={"url": url})
    return {"url": url, "paid": await run.receive("paid")}


@app.workflow("pair")
async def pair(run: Any) -> list[Any]:
    """Two receives on one channel at once: each takes a message of its own."""
    import asyncio

    return list(await asyncio.gather(run.receive("in"), run.receive("in")))


@app.workflow("reply_or_timer")
async def reply_or_timer(
    run: Any, seconds: float = 3600.0, timer_first: bool = False, then: bool = False, timeout: Any = None
) -> dict[str, Any]:
    """The first of a message on ``reply`` (None after ``timeout``) and a timer (given first if
    ``timer_first``), acted on once; then, if ``then``, the next message on ``reply``."""
    waits = [run.receive("reply", timeout=timeout), run.sleep(seconds)]
    if timer_first:
        waits.reverse()
    won = await run.first(*waits)
    kind = waits[won.which].kind
    await run.call(handle, n=0, message={"kind": kind, "value": won.value})
    after = await run.receive("reply") if then else None
    return {"kind": kind, "value": won.value, "then": after}


@app.tool(idempotent=True)
def create_payment(order: str, notify_url: str) -> dict[str, Any]:
    """A payment provider's call, told where to POST its webhook: it keeps the URL it was given (in
    ``handled``: what a provider would keep), captures its request and says the URL back."""
    a = current_action()
    from psycopg.types.json import Jsonb

    a.capture({"url": "https://pay.test/payments", "body": {"order": order, "notify_url": notify_url}})
    with connect() as c:
        c.execute(
            "INSERT INTO handled (key, run_id, op_id, n, message) VALUES (%s, %s, %s, 0, %s) "
            "ON CONFLICT (key) DO NOTHING",
            (a.idempotency_key, a.run_id, a.operation_id, Jsonb({"url": notify_url})),
        )
    return {"payment": f"pay-{order}", "notify_url": notify_url}


@app.workflow("pay")
async def pay(run: Any, order: str = "A7") -> dict[str, Any]:
    """docs/conversations.md's pattern (the URL handed to a tool), and the URL shown every other
    way a run shows a value: state, an event, its result."""
    url = await run.callback("paid", expires_in=3600)
    payment = await run.call(create_payment, order=order, notify_url=url)
    await run.set_state("notify", {"url": url})
    await run.emit("payment", {"url": url, "said": f"told the provider {url!r}"})
    confirmation = await run.receive("paid")
    return {"payment": payment, "confirmation": confirmation, "url": url}


@app.workflow("chatter")
async def chatter(run: Any, every: int = 3, total: int = 12, done: int = 0) -> dict[str, Any]:
    """A chat that never ends, but for the test: each message on ``in`` acted on once, counted in
    the run's state and an event, the run carried forward every ``every`` turns (``done`` carried),
    until ``total`` messages were handled."""
    for _ in range(every):
        if done >= total:
            return {"done": done}
        message = await run.receive("in")
        await run.call(handle, n=message["n"], message=message)
        done += 1
        await run.set_state("turns", done)
        await run.emit("turn", {"n": message["n"]})
    await run.carry_forward({"every": every, "total": total, "done": done})
