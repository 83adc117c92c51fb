"""Starting workers: one asyncio loop per process, ``processes`` processes."""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import signal
import sys

from outlast import failpoints, metrics, tracing
from outlast.app import App
from outlast.errors import ConfigError
from outlast.logs import configure
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import Store
from outlast.worker.loop import Worker


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (attribute defaults to ``app``) from the current directory too."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import the app module '{module_name}': {exc}") from None
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        raise ConfigError(f"'{spec}' is not an outlast App (expected MODULE:app)")
    return app


async def run_worker(app: App, settings: Settings, queues: list[str], signals: bool = True) -> None:
    """Serve until stopped. Settings must carry both URLs."""
    assert settings.database_url and settings.redis_url
    failpoints.arm(settings.failpoints)
    tracing.configure(settings.trace_payloads == "on")
    if settings.metrics_port:
        metrics.enable()
    store = Store(settings.database_url, settings.schema, max_size=4, retry_for=settings.store_retry)
    queue = Queue(settings.redis_url, settings.prefix, connections=settings.concurrency + 16)
    await store.open()
    await queue.ping()
    worker = Worker(app, store, queue, settings, queues)
    if signals:
        worker.install_signals()
    try:
        await worker.run()
    finally:
        await store.close()
        await queue.close()


def _child(spec: str, settings: Settings, queues: list[str]) -> None:
    configure(settings.log_format)
    asyncio.run(run_worker(load_app(spec), settings, queues))


def serve(spec: str, settings: Settings, queues: list[str], processes: int = 1) -> None:
    """Run ``processes`` worker processes (one runs in this process when ``processes`` is 1)."""
    if settings.metrics_port:  # served from here; with processes, before they are spawned
        metrics.serve(settings.metrics_port, processes)
    if processes <= 1:
        asyncio.run(run_worker(load_app(spec), settings, queues))
        return
    load_app(spec)  # fail here, once, rather than in every child
    ctx = multiprocessing.get_context("spawn")
    children = [ctx.Process(target=_child, args=(spec, settings, queues)) for _ in range(processes)]
    for c in children:
        c.start()

    def forward(sig: int, _frame: object) -> None:
        for c in children:
            if c.pid is not None and c.is_alive():
                os.kill(c.pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for c in children:
        c.join()
