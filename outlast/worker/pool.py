"""The pool starts workers: one event loop per process, ``processes`` processes. With more than one,
this process supervises them: a child that dies is replaced (with backoff, and a log line naming
its exit), SIGTERM/SIGINT is passed on once for the graceful hand-over, and the pool gives up,
non-zero, when a child keeps dying before it could serve."""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event

import structlog

from outlast import _failpoints as failpoints, _logs as logs, _metrics as metrics, _tracing as tracing
from outlast._callbacks import require_setup
from outlast._logs import configure
from outlast._secrets import require_key
from outlast.app import App
from outlast.errors import ConfigError, OutlastError, WorkersDying
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import Store
from outlast.worker import eventloop
from outlast.worker.loop import CLOSE_WITHIN, STOP_SLACK, Worker

log = structlog.get_logger("outlast.pool")

MAX_START_FAILURES = 5  # a child dead before it was ready this many times in a row: give up
STEADY = 30.0  # seconds a child must live for its place's backoff to start over
MAX_BACKOFF = 30.0
KILL_MARGIN = 0.5  # past a child's own bound (grace + STOP_SLACK + CLOSE_WITHIN): SIGKILL


def load_app(spec: str) -> App:
    """Import ``module:attribute`` (attribute defaults to ``app``) from the current directory too."""
    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import the app module '{module_name}': {exc}") from None
    except (TypeError, ValueError) as exc:  # a registration refused (an unknown effect, a name twice)
        raise ConfigError(f"the app module '{module_name}' does not load: {exc}{_where(exc)}") from None
    app = getattr(module, attr or "app", None)
    if not isinstance(app, App):
        raise ConfigError(f"'{spec}' is not an outlast App (expected MODULE:app)")
    return app


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the app's own line that raised, the last frame outside outlast."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith((ours, "<"))]
    return f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""


async def run_worker(
    app: App,
    settings: Settings,
    queues: list[str],
    signals: bool = True,
    ready: Callable[[], object] | None = None,
) -> None:
    """Serve until stopped. Settings must carry both URLs. ``ready`` is called once both servers
    answered, the schema is current and the worker could be built (its secret key checked)."""
    assert settings.database_url and settings.redis_url
    failpoints.arm(settings.failpoints)
    tracing.configure(settings.trace_payloads == "on")
    logs.show_payloads(settings.log_payloads == "on")
    if settings.metrics_port:
        metrics.enable(settings.metrics_tenants)
    store = Store.from_settings(settings)
    queue = Queue(settings.redis_url, settings.prefix, connections=settings.concurrency + 16)
    try:
        await store.open()
        await queue.ping()
        worker = Worker(app, store, queue, settings, queues)  # refuses a missing secret key
        if ready is not None:
            ready()
        if signals:
            worker.install_signals()
        eventloop.pace_collector()
        await worker.run()
    finally:
        await _close(store, queue)


async def _close(store: Store, queue: Queue) -> None:
    """Close the store and the queue within CLOSE_WITHIN. Whatever cannot close by then (a
    connection attempt hanging on a half-open link) is left to the OS at exit: nothing durable
    waits on it, what was not written is left to the leases, as after a crash."""
    try:
        async with asyncio.timeout(CLOSE_WITHIN):
            await store.close()
            await queue.close()
    except TimeoutError:
        log.warning("worker.close_abandoned", within=CLOSE_WITHIN)


def _watch_parent(parent: int) -> None:
    """Stop this child (handing its runs over) once the pool that started it is gone."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGTERM)


def _child(spec: str, settings: Settings, queues: list[str], ready: Event) -> None:
    # A group of its own: a terminal's Ctrl-C reaches the pool only, which passes it on once
    # (a second signal would make the worker exit at once, without the hand-over).
    os.setpgid(0, 0)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    configure(settings.log_format)
    try:
        eventloop.run(run_worker(load_app(spec), settings, queues, ready=ready.set), settings.event_loop)
    except OutlastError as exc:  # one line, as the command would print it; the pool reports the exit
        print(f"outlast: error: worker process {os.getpid()}: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


@dataclass
class _Place:
    """A ``_Place`` is one place in the pool: the child in it and how its children have been dying."""

    process: BaseProcess | None = None
    ready: Event | None = None
    started: float = 0.0
    deaths: int = 0  # in a row, each within STEADY seconds of its start
    start_failures: int = 0  # in a row, before the child was ready
    restart_at: float = 0.0


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


class Pool:
    """A ``Pool`` supervises ``processes`` worker processes."""

    def __init__(self, spec: str, settings: Settings, queues: list[str], processes: int) -> None:
        self.args = (spec, settings, queues)
        self.ctx = multiprocessing.get_context("spawn")
        self.places = [_Place() for _ in range(processes)]
        self.stop_signal: int | None = None
        self.signalled: set[int] = set()  # children the stop signal was passed on to

    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (then wait for every child's hand-over); raises
        ``WorkersDying`` when a place's child keeps dying before it is ready."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        try:
            while self.stop_signal is None:
                self._step()
        finally:
            self._stop(self.stop_signal or signal.SIGTERM)

    def _on_signal(self, sig: int, _frame: object) -> None:
        if self.stop_signal is not None:  # a second signal: passed on again, the children exit at once
            self.signalled.clear()
        else:
            log.info("pool.stopping", signal=signal.Signals(sig).name)
        self.stop_signal = sig
        self._pass_on(sig)

    def _pass_on(self, sig: int) -> None:
        """The signal, once, to each live child not yet given it."""
        for place in self.places:
            p = place.process
            if p is not None and p.pid is not None and p.pid not in self.signalled and p.is_alive():
                self.signalled.add(p.pid)
                os.kill(p.pid, sig)

    def _stop(self, sig: int) -> None:
        """Wait for every child, each within its own bound and a margin; one still alive is
        killed (SIGKILL), said in the log: its runs are left to their leases, as after a crash."""
        self._pass_on(sig)  # also a child started as the signal came
        bound = self.args[1].grace + STOP_SLACK + CLOSE_WITHIN + KILL_MARGIN
        deadline = time.monotonic() + bound
        for place in self.places:
            p = place.process
            if p is not None:
                p.join(max(deadline - time.monotonic(), 0.0))
                if p.is_alive():
                    log.warning("pool.process_killed", pid=p.pid, after=bound)
                    p.kill()
                    p.join()

    def _step(self) -> None:
        now = time.monotonic()
        for index, place in enumerate(self.places, 1):
            if place.process is None and now >= place.restart_at and self.stop_signal is None:
                self._start(index, place)
        live = [p.process.sentinel for p in self.places if p.process is not None]
        due = [p.restart_at - now for p in self.places if p.process is None]
        wait(live, timeout=max(min([1.0, *due]), 0.01))
        for place in self.places:
            if place.process is not None and not place.process.is_alive() and self.stop_signal is None:
                self._died(place)

    def _start(self, index: int, place: _Place) -> None:
        spec, settings, queues = self.args
        if settings.worker_name:  # NAME-1, NAME-2...: children sharing one name would share a record
            settings = settings.with_(worker_name=f"{settings.worker_name}-{index}")
        place.ready = self.ctx.Event()
        place.process = self.ctx.Process(target=_child, args=(spec, settings, queues, place.ready))
        place.process.start()
        place.started = time.monotonic()

    def _died(self, place: _Place) -> None:
        assert place.process is not None and place.ready is not None
        pid, how = place.process.pid, _exit(place.process.exitcode)
        was_ready = place.ready.is_set()
        place.process.close()
        place.process = None
        metrics.process_dead(pid)
        now = time.monotonic()
        place.deaths = place.deaths + 1 if now - place.started < STEADY else 1
        place.start_failures = 0 if was_ready else place.start_failures + 1
        if place.start_failures >= MAX_START_FAILURES:
            raise WorkersDying(
                f"worker processes keep dying at start: {place.start_failures} in a row before they "
                f"could serve, the last (pid {pid}) with {how}; its log above says why"
            )
        delay = min(0.25 * 2 ** (place.deaths - 1), MAX_BACKOFF)
        place.restart_at = now + delay
        log.warning("pool.process_exited", pid=pid, how=how, served=was_ready, restart_in=round(delay, 2))


def serve(spec: str, settings: Settings, queues: list[str], processes: int = 1) -> None:
    """Run ``processes`` worker processes (one runs in this process when ``processes`` is 1;
    more are supervised by this one)."""
    app = load_app(spec)  # fail here, once, rather than in every child
    require_key(app, settings.secret_key)
    app.check()
    require_setup({n: wf.fn for n, wf in app.workflows.items()}, settings.secret_key, settings.callback_url)
    if settings.metrics_port:  # served from here; with processes, before they are spawned
        metrics.serve(settings.metrics_port, processes, settings.metrics_tenants, settings.metrics_host)
    if processes <= 1:
        eventloop.run(run_worker(app, settings, queues), settings.event_loop)
        return
    Pool(spec, settings, queues, processes).run()
