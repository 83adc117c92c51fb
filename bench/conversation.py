"""A conversation of many turns with one run: per turn, one message in (``run.receive``), one tool
call and one event out (``run.emit``). Measures, at turn 10 and at the last turn, what a turn
costs the worker: the journal it replays when the message wakes it, the wall time from ``send``
returned to the workflow holding the message (the wake-up and the replay) and to the event out
(the whole turn), and the worker's CPU over that span.

    OUTLAST_DATABASE_URL=... OUTLAST_REDIS_URL=... PYTHONPATH=. python3 bench/conversation.py --turns 1000

One in-process worker (``outlast.testing``) on a schema and key prefix of its own, dropped at the
end. With ``--linger 0`` (``OUTLAST_RECEIVE_LINGER``), before each send the run waits with no worker
held, so every turn is a wake-up: the worker claims the run, loads its journal and replays the
workflow from its start to the ``receive`` that takes the new message. With a linger, each send
comes while the run lingers held (outlast/worker/linger.py): the receive takes it, no replay.
"replayed" counts a turn's journal only if the run was claimed again for it (its fencing token).
CPU is this process's (``time.process_time``): the worker's, plus a ``send`` and the bench's own
bookkeeping. Indicative only: the machine's load is in the figures.
Not a test: nothing asserts a bound.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import threading
import time
from typing import Any

from outlast import App
from outlast._logs import configure
from outlast.testing import Harness

app = App()
marks: dict[tuple[str, int], tuple[float, float]] = {}  # (what, turn) -> (perf_counter, process_time)
marked = threading.Condition()


def mark(what: str, turn: int) -> None:
    with marked:  # a replay passes the same line again: only the live pass counts
        marks.setdefault((what, turn), (time.perf_counter(), time.process_time()))
        marked.notify_all()


@app.tool()
def answer(turn: int, text: str) -> str:
    return f"turn {turn}: {len(text)} characters"


@app.workflow("conversation")
async def conversation(run: Any, turns: int) -> int:
    for k in range(turns):
        message = await run.receive("user")
        mark("held", k)
        reply = await run.call(answer, turn=k, text=message["text"])
        await run.emit("reply", {"turn": k, "text": reply})
        mark("out", k)
    return turns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=1000)
    ap.add_argument("--window", type=int, default=10, help="turns averaged at each end")
    ap.add_argument("--linger", type=float, default=0.0, help="OUTLAST_RECEIVE_LINGER, seconds")
    a = ap.parse_args()
    db = os.environ.get("OUTLAST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    rd = os.environ.get("OUTLAST_REDIS_URL", "redis://127.0.0.1:6379/0")
    configure(level=logging.WARNING)  # a worker's lines, one a turn, would be most of the output
    h = Harness.create(app, db, rd, sweep_interval=1.0, receive_linger=a.linger)
    ready = "lingering" if a.linger > 0 else "waiting"
    look = """SELECT CASE WHEN state = 'running' AND EXISTS (SELECT 1 FROM watchers WHERE run_id = id)
                          THEN 'lingering' ELSE state END, journal_len, fencing_token
              FROM runs WHERE id = %s"""
    rows: list[tuple[int, int, float, float, float]] = []  # turn, journal, held ms, out ms, cpu ms
    try:
        h.start_worker()
        run = h.client.enqueue("conversation", {"turns": a.turns})
        began = time.monotonic()
        for k in range(a.turns):
            while True:  # the run waits or lingers (polled at 5 ms; not measured)
                (state, length, token) = h.sql(look, run.id)[0]
                if state == ready:
                    break
                time.sleep(0.005)
            h.send(run.id, "user", {"text": f"message {k}"})
            sent, cpu0 = time.perf_counter(), time.process_time()
            with marked:
                marked.wait_for(lambda k=k: ("out", k) in marks, timeout=60)
            held, out = marks[("held", k)], marks[("out", k)]
            claimed = h.sql("SELECT fencing_token FROM runs WHERE id = %s", run.id)[0][0] != token
            rows.append(
                (
                    k + 1,
                    length if claimed else 0,
                    (held[0] - sent) * 1000,
                    (out[0] - sent) * 1000,
                    (out[1] - cpu0) * 1000,
                )
            )
            if (k + 1) % 100 == 0:
                print(f"  turn {k + 1}: journal {length}, turn {rows[-1][3]:.1f} ms", flush=True)
        h.wait(run.id, timeout=120)
        total = time.monotonic() - began
        w = a.window

        def show(label: str, part: list[tuple[int, int, float, float, float]]) -> None:
            print(
                f"{label:>14}: journal replayed {statistics.mean(r[1] for r in part):6.0f} entries, "
                f"send -> held {statistics.median(r[2] for r in part):6.1f} ms, "
                f"send -> event out {statistics.median(r[3] for r in part):6.1f} ms, "
                f"worker CPU {statistics.median(r[4] for r in part):6.1f} ms (medians)"
            )

        print(
            f"{a.turns} turns in {total:.0f} s, linger {a.linger:g} s, load average {os.getloadavg()[0]:.1f}"
        )
        show(
            f"turns {max(1, 10 - w // 2)}-{10 + w // 2 - 1}", rows[max(0, 10 - w // 2 - 1) : 10 + w // 2 - 1]
        )
        show(f"turns {a.turns - w + 1}-{a.turns}", rows[-w:])
    finally:
        h.close()


if __name__ == "__main__":
    main()
