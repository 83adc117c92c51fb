"""An order workflow in three versions, for offline replay: ``app`` (the one runs were made by),
``same`` (its code rewritten, every crossing the same) and ``changed`` (a fee added to the charge:
the charge's arguments differ, which a replay must catch). Its ``summarize`` tool is a model call
that captures the request it sends (``current_action().capture``), with a secret API key."""

from __future__ import annotations

from typing import Any

from outlast import App, current_action

KEY = "sk-live-7f3a9c"  # the model's API key: a secret argument, never stored in clear


def register_tools(app: App) -> None:
    @app.tool("quote", effect="read")
    def quote(item: str) -> float:
        return {"book": 12.5, "lamp": 40.0}.get(item, 1.0)

    @app.tool("charge")
    def charge(amount: float) -> str:
        return f"receipt-{amount:g}"

    @app.tool("ship")
    def ship(item: str, qty: int) -> str:
        return f"parcel-{item}-{qty}"

    @app.tool("summarize", kind="model", model="tiny-1", secret=["api_key"])
    def summarize(note: str, api_key: str) -> str:
        messages = [  # the prompt as assembled: instructions, what retrieval found, the note
            {"role": "system", "content": "Summarize the order note in five words."},
            {"role": "system", "content": f"The customer's earlier note: {note}"},
            {"role": "user", "content": note},
        ]
        request = {
            "url": "https://models.example/v1/chat",
            "headers": {"authorization": f"Bearer {api_key}"},
            "body": {"model": "tiny-1", "messages": messages},
        }
        current_action().capture(request)  # what leaves the process, as it leaves
        return note[:20]


app = App()
register_tools(app)


@app.workflow("order")
async def order(run: Any, item: str, qty: int, note: str = "") -> dict[str, Any]:
    price = await run.call("quote", item=item)
    receipt = await run.call("charge", amount=price * qty)
    if qty > 5:
        await run.approval("ship", {"item": item, "qty": qty}, approvers=["ops"])
    summary = await run.call("summarize", note=note, api_key=KEY) if note else None
    parcel = await run.call("ship", item=item, qty=qty)
    return {"receipt": receipt, "parcel": parcel, "summary": summary}


same = App()
register_tools(same)


@same.workflow("order")
async def order_rewritten(run: Any, item: str, qty: int, note: str = "") -> dict[str, Any]:
    """The same crossings in the same order, the code written otherwise."""
    unit = await run.call("quote", item=item)
    total = sum(unit for _ in range(qty))
    receipt = await run.call("charge", amount=total)
    if qty >= 6:
        await run.approval("ship", {"qty": qty, "item": item}, approvers=["ops"])
    summary = None
    if note:
        summary = await run.call("summarize", note=note, api_key=KEY)
    return {"receipt": receipt, "parcel": await run.call("ship", item=item, qty=qty), "summary": summary}


changed = App()
register_tools(changed)


@changed.workflow("order")
async def order_with_fee(run: Any, item: str, qty: int, note: str = "") -> dict[str, Any]:
    """A fee added to the charge: runs charged by ``app`` cannot be replayed by this code."""
    price = await run.call("quote", item=item)
    receipt = await run.call("charge", amount=price * qty + 1.5)
    if qty > 5:
        await run.approval("ship", {"item": item, "qty": qty}, approvers=["ops"])
    summary = await run.call("summarize", note=note, api_key=KEY) if note else None
    parcel = await run.call("ship", item=item, qty=qty)
    return {"receipt": receipt, "parcel": parcel, "summary": summary}
