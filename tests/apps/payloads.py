"""The world of tests/integration/test_payloads.py and tests/crash/test_payloads_crash.py: tools
whose results are large (``report``: ``size`` characters, the same text each time for the same
``seed``; ``fresh``: a read whose text differs at each call) and a small one (``note``)."""

from __future__ import annotations

import uuid

from outlast import App, Run

app = App()


def text_of(seed: str, size: int) -> str:
    line = (seed * 64)[:63] + "\n"
    return (line * (size // 64 + 1))[:size]


@app.tool("report", effect="read")
def report(seed: str, size: int) -> str:
    return text_of(seed, size)


@app.tool("fresh", effect="read")
def fresh(size: int) -> str:
    return text_of(uuid.uuid4().hex, size)


@app.tool("note")
def note(text: str) -> dict[str, int]:
    return {"length": len(text)}


@app.workflow("large")
async def large(run: Run, size: int, seed: str = "a") -> dict[str, int]:
    first = await run.call("report", seed=seed, size=size)
    again = await run.call("report", seed=seed, size=size)  # the same value: stored once in the run
    told = await run.call("note", text=first[:100])
    return {"length": len(first), "same": int(first == again), "told": told["length"]}


@app.workflow("large_fresh")
async def large_fresh(run: Run, size: int) -> dict[str, int]:
    got = await run.call("fresh", size=size)
    await run.call("note", text=got[:10])
    return {"length": len(got)}


@app.workflow("large_then_sleep")
async def large_then_sleep(run: Run, size: int) -> dict[str, int]:
    got = await run.call("report", seed="s", size=size)
    await run.sleep(60)  # resumed after it: the result is read back from the payload store
    return {"length": len(got)}


@app.workflow("inbox")
async def inbox(run: Run) -> dict[str, int]:
    got = await run.receive("in")  # a large message: taken from the payload store
    told = await run.call("note", text=got["text"][:100])
    return {
        "length": len(got["text"]),
        "same": int(got["text"].startswith(text_of("m", 4096))),
        "told": told["length"],
    }


@app.workflow("big_input")
async def big_input(run: Run, text: str) -> dict[str, int]:
    told = await run.call("note", text=text[:100])  # the input, read back whole at the claim
    return {"length": len(text), "same": int(text.startswith(text_of("i", 4096))), "told": told["length"]}


@app.workflow("big_result")
async def big_result(run: Run, size: int) -> dict[str, str]:
    return {"text": text_of("r", size)}  # held by reference in the run's row


@app.workflow("big_fresh_result")
async def big_fresh_result(run: Run, size: int) -> dict[str, str]:
    return {"text": text_of(uuid.uuid4().hex, size)}  # a different text at each attempt


@app.workflow("big_shown")
async def big_shown(run: Run, size: int) -> dict[str, int]:
    await run.set_state("report", {"text": text_of("s", size)})  # the state row holds a reference
    await run.emit("report", {"text": text_of("e", size)})  # the event row too
    await run.set_state("small", {"n": 1})  # inline, as ever
    await run.call("note", text="after")  # resumed past them: served from the journal whole
    return {"length": size}


@app.workflow("big_carry")
async def big_carry(run: Run, size: int, text: str = "") -> dict[str, int]:
    if not text:  # generation 0 carries a large input forward
        await run.carry_forward({"size": size, "text": text_of("c", size)})
    told = await run.call("note", text=text[:100])
    return {"length": len(text), "same": int(text == text_of("c", size)), "told": told["length"]}


@app.workflow("big_child")
async def big_child(run: Run, size: int) -> dict[str, int]:
    child = await run.start("big_input", {"text": text_of("i", size)})  # its row holds a reference
    got: dict[str, int] = await child.result()
    return got


@app.workflow("big_answer")
async def big_answer(run: Run) -> dict[str, int]:
    got = await run.request("report", {"q": "the report?"}, response=dict)  # answered with 10 MiB
    told = await run.call("note", text=got["text"][:100])
    return {
        "length": len(got["text"]),
        "same": int(got["text"].startswith(text_of("a", 4096))),
        "told": told["length"],
    }
