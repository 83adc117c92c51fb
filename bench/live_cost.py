"""What live output costs (``run.stream``, ``current_action().stream``), and that a run that does
not stream pays nothing for it. Indicative only: on a loaded machine, read the ratios.

- Per chunk: ``LiveOutput.send`` of N chunks of 16 bytes to a private ``redis-server``, the way a
  model tool streams tokens (one chunk, then the loop turns; or bursts of 32 chunks in a turn,
  which go in one round trip); the process's CPU and the wall time per chunk, and the round trips.
- A run that does not stream: R runs of the bench workload (5 tool calls each) through one
  in-process worker, with ``LiveChunks.add`` counted: its Redis calls for live output.

    PYTHONPATH=. python bench/live_cost.py [--chunks 20000] [--runs 300]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from common import DEFAULT_DB, Config, drop_schema, private_redis
from outlast_runs import enqueue_all, fresh, in_process, settings

from outlast._logs import configure
from outlast.queue import LiveChunks, Queue
from outlast.worker.live import LiveOutput


async def per_chunk(redis_url: str, chunks: int, burst: int) -> tuple[float, float, int]:
    """CPU µs and wall µs per chunk, and the round trips, for ``chunks`` chunks sent ``burst`` a turn."""
    queue = Queue(redis_url, "bench-live")
    calls = 0
    live_chunks = LiveChunks(queue)
    add = live_chunks.add

    async def counted(run_id: str, entries: list[dict[str, str]]) -> None:
        nonlocal calls
        calls += 1
        await add(run_id, entries)

    live_chunks.add = counted  # type: ignore[method-assign]
    live = LiveOutput(live_chunks)
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(chunks):
        live.send("run-1", "op-1", f"token-{i:010d}")  # 16 bytes
        if (i + 1) % burst == 0:
            await asyncio.sleep(0)
    await live.close()
    while live._queued:  # the last sender's final round trip
        await asyncio.sleep(0.001)
        await live.close()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    await queue.close()
    assert live.sent == chunks and live.dropped == 0, (live.sent, live.dropped)
    return cpu / chunks * 1e6, wall / chunks * 1e6, calls


def quiet_runs(cfg: Config, runs: int) -> tuple[int, float]:
    """Live output's Redis calls after ``runs`` runs that do not stream, and their runs per second."""
    calls = 0
    add = LiveChunks.add

    async def counted(self: LiveChunks, run_id: str, entries: list[dict[str, str]]) -> None:
        nonlocal calls
        calls += 1
        await add(self, run_id, entries)

    async def go() -> float:
        await enqueue_all(s, "steps", [{"k": 5}] * runs)
        seconds, _cpu, _busy, _store = await in_process(s, runs, "shared", 16)
        return runs / seconds

    LiveChunks.add = counted  # type: ignore[method-assign]
    s = settings(cfg)
    fresh(s)
    try:
        rate = asyncio.run(go())
    finally:
        LiveChunks.add = add  # type: ignore[method-assign]
        drop_schema(cfg.database_url, s.schema)
    return calls, rate


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=20000)
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--database-url", default=DEFAULT_DB)
    a = p.parse_args()
    configure("json", logging.WARNING)
    with private_redis() as redis_url:
        for burst in (1, 32):
            cpu, wall, trips = asyncio.run(per_chunk(redis_url, a.chunks, burst))
            print(
                f"live chunks, {burst:>2} a turn: {cpu:6.1f} µs CPU and {wall:6.1f} µs wall per chunk,"
                f" {trips} round trips for {a.chunks} chunks"
            )
        cfg = Config(a.database_url, redis_url, a.runs)
        calls, rate = quiet_runs(cfg, a.runs)
        print(f"runs that do not stream: {a.runs} runs ({rate:.0f}/s), {calls} Redis calls for live output")


if __name__ == "__main__":
    main()
