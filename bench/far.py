"""A TCP proxy that delays every chunk it forwards, each way: Postgres as if across a zone.

    python bench/far.py LISTEN_PORT TARGET_HOST:PORT DELAY_MS [BACK_MS]

Each chunk read from one side is written to the other ``DELAY_MS`` later, in order (a round trip
gains twice the delay, as measured by ``python bench/far.py --probe URL``); ``BACK_MS``, when given,
is the delay of the server's replies instead. A round trip gains at least a millisecond per delayed
way (see below): ``0.5 0`` adds about 1.3 ms, ``0.5`` about 3 ms. This machine's kernel
has no ``netem``, so the delay is made here, in user space, on asyncio's own loop (uvloop's
timers round 0.5 ms down to nothing; asyncio's epoll waits round up to the millisecond).
"""

from __future__ import annotations

import asyncio
import sys
import time


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(65536):
            due = time.monotonic() + delay
            loop.call_at(loop.time() + max(0.0, due - time.monotonic()), writer.write, data)
    finally:
        await asyncio.sleep(delay)
        writer.close()


async def main(port: int, host: str, target: int, delay: float, back: float) -> None:
    async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        tr, tw = await asyncio.open_connection(host, target)
        await asyncio.gather(pipe(r, tw, delay), pipe(tr, w, back), return_exceptions=True)

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def probe(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT 1")
        t = time.perf_counter()
        for _ in range(200):
            c.execute("SELECT 1").fetchone()
        print(f"{(time.perf_counter() - t) / 200 * 1000:.2f} ms per round trip")


if __name__ == "__main__":
    if sys.argv[1] == "--probe":
        probe(sys.argv[2])
    else:
        h, p = sys.argv[2].rsplit(":", 1)
        back = sys.argv[4] if len(sys.argv) > 4 else sys.argv[3]
        asyncio.run(main(int(sys.argv[1]), h, int(p), float(sys.argv[3]) / 1000, float(back) / 1000))
