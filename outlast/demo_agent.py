"""``outlast demo agent`` shows a support agent (pydantic-ai) whose worker dies after the refund.

A fresh worker takes it over, replays the model's journaled answers (the model is not asked
again) and sends the refund again with its idempotency key: one refund, one email.

Like ``outlast demo``, it runs in a schema and key prefix of its own, reset at each start, with real
worker processes (``python -m outlast worker outlast.demo_agent_app:app``). It needs
``outlast[agents]``; the model is a script, so no API key and no network.
"""

from __future__ import annotations

import asyncio
import signal
import time

from outlast.demo import LEASE, WorkerProcess, _final, _reset, _told, say
from outlast.errors import DemoFailed, OutlastError
from outlast.producer import AsyncClient
from outlast.services import resolve
from outlast.settings import Settings

APP = "outlast.demo_agent_app:app"


async def _story(settings: Settings, t0: float) -> None:
    from outlast import demo_agent_app as shop

    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    s, note = resolve(settings)
    if note:
        say(note)
    s = s.with_(schema=f"{s.schema}_demo", prefix=f"{s.prefix}:demo")
    assert s.database_url
    await _reset(s, f"{s.schema}_bank")
    where = shop.shop_schema(s.schema)
    shop.reset_shop(s.database_url, where)
    say("\nThe agent 'support' (pydantic-ai, on a scripted model) has three tools:")
    say("  lookup_order    a read")
    say("  refund          idempotent: the shop keeps one refund per idempotency key")
    say("  email_customer  a plain send, reconciled against the outbox")
    say("Each model request and each tool call is an outlast operation.")
    workers: list[WorkerProcess] = []
    async with AsyncClient(settings=s, app=shop.app) as client:
        try:
            run = await client.enqueue("support", {"prompt": "Refund order A7, please."})
            say(f"\n1. Enqueued run {run.id}: 'Refund order A7, please.'")
            say("2. Started worker demo-1, armed to die right after the shop makes the refund.")
            armed = "after_effect:support.refund"
            first = await WorkerProcess.start("demo-1", s, failpoints=armed, app=APP)
            workers.append(first)
            await first.wait_for(lambda e: f"failpoint {armed} hit" in e["event"], "the planned crash")
            await asyncio.wait_for(first.proc.wait(), 20)
            asked = len(shop.shop_rows(s.database_url, where, "model_calls", run.id))
            say("   ✗ demo-1 died (SIGKILL) after the refund, before outlast recorded its result.")
            say(f"   The model had answered {asked} requests; their responses are journaled.")
            say(f"3. Started worker demo-2. It takes the run over once the lease expires ({LEASE:.0f}s):")
            t = time.monotonic()
            second = await WorkerProcess.start("demo-2", s, app=APP)
            workers.append(second)
            result = await _final(client, run.id, second)
            for e in second.events:
                line = _told(e)
                if line:
                    say(f"     {line}")
            say(f"   run {run.id} succeeded after {time.monotonic() - t:.1f}s: {result!r}")
            _check(s.database_url, where, run.id, asked)
        finally:
            for w in workers:
                await w.stop()
    say(f"\nDone in {time.monotonic() - t0:.1f}s. Look closer (read only):")
    say(f"  outlast --schema {s.schema} status {run.id} --op op-1")


def _check(database_url: str, where: str, run_id: str, asked_before: int) -> None:
    """What the world says: each model step asked once, one refund, one email."""
    from outlast import demo_agent_app as app

    calls = app.shop_rows(database_url, where, "model_calls", run_id)
    refunds = app.shop_rows(database_url, where, "refunds", run_id)
    emails = app.shop_rows(database_url, where, "outbox", run_id)
    steps = [row[2] for row in calls]
    say(f"4. The model was asked {len(steps)} times, for steps {steps}: none asked twice.")
    say(
        f"   The shop: {len(refunds)} refund (asked {refunds[0][4] if refunds else 0}x), {len(emails)} email."
    )
    if sorted(set(steps)) != steps or len(refunds) != 1 or len(emails) != 1 or len(steps) <= asked_before:
        raise DemoFailed(f"run {run_id}: model steps {steps}, {len(refunds)} refunds, {len(emails)} emails")
    say("   Exactly one refund: the shop saw the same idempotency key twice and refunded once.")


def main(settings: Settings) -> None:
    """Tell the agent's story; on any failure, one line and a non-zero exit."""
    t0 = time.monotonic()
    say("outlast demo agent: a support agent whose worker dies right after the refund")
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        raise DemoFailed("the agent demo needs pydantic-ai: pip install 'outlast[agents]'") from None
    try:
        asyncio.run(_story(settings, t0))
    except OutlastError:
        raise
    except asyncio.CancelledError:
        raise DemoFailed("stopped by SIGTERM (its workers were stopped)") from None
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DemoFailed(f"the demo stopped: {type(exc).__name__}: {first}") from None
