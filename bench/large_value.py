"""A tool returning a large value (50 MiB by default) in a real worker process: the run's
outcome, and the worker's peak RSS (VmHWM) against its RSS before the run. With the workflow
``big_input``, the value is the run's input instead; with ``inbox``, a message the run takes.

    OUTLAST_DATABASE_URL=... OUTLAST_REDIS_URL=... python bench/large_value.py [MiB] [WORKFLOW]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from outlast import Client
from outlast.settings import Settings
from outlast.store import Store
from tests.apps.payloads import text_of


def _kib(pid: int, field: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return int(line.split()[1])
    return 0


def _start(c: Client, workflow: str, size: int) -> str:
    if workflow == "big_input":
        return c.enqueue(workflow, {"text": text_of("i", size)}).id
    if workflow == "inbox":
        rid = c.enqueue(workflow).id
        c.send(rid, "in", {"text": text_of("m", size)})
        return rid
    return c.enqueue(workflow, {"size": size}).id


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    tag = uuid.uuid4().hex[:8]
    env = dict(os.environ, OUTLAST_SCHEMA=f"bench_{tag}", OUTLAST_PREFIX=f"bench-{tag}")
    os.environ.update(env)
    s = Settings.from_env()
    import asyncio

    async def migrate() -> None:
        store = Store.from_settings(s)
        await store.open(check=False)
        await store.migrate()
        await store.close()

    asyncio.run(migrate())
    worker = subprocess.Popen([sys.executable, "-m", "outlast", "worker", "tests.apps.payloads:app"], env=env)
    try:
        time.sleep(4)
        base = _kib(worker.pid, "VmRSS")
        with Client(settings=s) as c:
            workflow = sys.argv[2] if len(sys.argv) > 2 else "large_fresh"  # one call; "large": two
            rid = _start(c, workflow, mib * 1024 * 1024)
            run = c.wait(rid, timeout=300)
            peak = _kib(worker.pid, "VmHWM")
            print(f"state={run.state} result={run.result}")
            print(
                f"value {mib} MiB; worker RSS before {base / 1024:.0f} MiB, peak {peak / 1024:.0f} MiB, "
                f"over before {(peak - base) / 1024:.0f} MiB = {(peak - base) / 1024 / mib:.2f}x the value"
            )
    finally:
        worker.terminate()
        worker.wait(30)


if __name__ == "__main__":
    main()
