"""This module keeps the Prometheus metrics of a worker process (``outlast worker --metrics-port P``).

Nothing here is imported, made or counted until ``enable()``: without ``--metrics-port`` every hook
is a call that returns at once (but ``operation``, which also counts the in-memory latency tally of
the dashboard's charts, ``outlast._latency``), and prometheus-client (the ``metrics`` extra) need not
be installed.
Labels are workflows, tools, states, outcomes, kinds and queues: never a run or operation id. A
run's tenant is a label only when the operator lists it (``OUTLAST_METRICS_TENANTS``): tenants are
unbounded, a label must not be; the others are ``other``, a run without one ``""``.

The hooks are one-line calls in the loop, executor, dispatcher, sweeper and writer; neither they
nor ``outlast._tracing``'s spans make a write of their own to Postgres or Redis on an operation's path.

With several processes (``--processes``), the parent serves the endpoint and the children write
their values to files in a directory of the parent's (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from typing import Any

from outlast._latency import BOUNDS as LATENCY_BUCKETS, TALLY
from outlast.errors import ConfigError

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
REFRESH = 5.0  # seconds between two refreshes of the gauges read from Redis and Postgres


def _client() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise ConfigError("--metrics-port needs prometheus-client: pip install 'outlast[metrics]'") from None
    return prometheus_client


class _Metrics:
    """``_Metrics`` holds the metric objects, made once per process."""

    def __init__(self) -> None:
        p = _client()
        self.runs_started = p.Counter(
            "outlast_runs_started",
            "Run attempts started (a resumed run counts again).",
            ["workflow", "tenant"],
        )
        self.runs_finished = p.Counter(
            "outlast_runs_finished", "Runs committed in a final state.", ["workflow", "state", "tenant"]
        )
        self.operations = p.Histogram(
            "outlast_operation_seconds",
            "Operations dispatched, from the intention (or a gap's re-dispatch) to the result "
            "committed; outcome ok, error or in_doubt.",
            ["tool", "outcome"],
            buckets=LATENCY_BUCKETS,
        )
        self.retries = p.Counter("outlast_dispatch_retries", "Tool dispatches retried (Retry).", ["tool"])
        self.resolutions = p.Counter(
            "outlast_resolutions", "Intentions without result resolved after a takeover, by kind.", ["kind"]
        )
        self.in_doubt = p.Counter("outlast_in_doubt_declared", "Operations declared in doubt.", ["tool"])
        self.in_doubt_open = p.Gauge(
            "outlast_in_doubt_open",
            "Runs waiting on an unresolved in-doubt operation.",
            multiprocess_mode="mostrecent",
        )
        self.stalled = p.Gauge(
            "outlast_stalled_run_seconds",
            "Longest time a running run has gone without progress (its claim or its last journal "
            "entry); 0 when none runs.",
            multiprocess_mode="mostrecent",
        )
        self.parked = p.Gauge(
            "outlast_runs_parked",
            "Runs parked until a person acts, by reason: workflow_error (a bug), program_changed, "
            "resume_impossible (a replay diverged), paused.",
            ["reason"],
            multiprocess_mode="mostrecent",
        )
        self.leases_lost = p.Counter("outlast_leases_lost", "Runs lost to a newer fencing token.")
        self.reclaimed = p.Counter("outlast_entries_reclaimed", "Stream entries reclaimed.", ["queue"])
        self.republished = p.Counter("outlast_republished", "Runs re-published by the sweeper.", ["queue"])
        self.handed_back = p.Counter(
            "outlast_handed_back", "Runs handed back for a worker that serves their program.", ["queue"]
        )
        self.dead_letters = p.Counter("outlast_dead_letters", "Stream entries dead-lettered.", ["queue"])
        self.queue_lag = p.Gauge(
            "outlast_queue_lag_seconds",
            "Age of the oldest stream entry not yet delivered to a worker.",
            ["queue"],
            multiprocess_mode="mostrecent",
        )
        self.stream_length = p.Gauge(
            "outlast_stream_length",
            "Entries in the queue's stream.",
            ["queue"],
            multiprocess_mode="mostrecent",
        )
        self.journaled = p.Counter(
            "outlast_journal_bytes",
            "Bytes of journal entries committed (their bodies as UTF-8), by workflow: what the "
            "journal grows by.",
            ["workflow"],
        )
        self.batch = p.Histogram(
            "outlast_commit_batch_size", "Writes per shared commit.", buckets=BATCH_BUCKETS
        )
        self.busy = p.Gauge(
            "outlast_writer_busy_ratio",
            "Share of the last refresh interval the shared-commit writer spent committing.",
            multiprocess_mode="liveall",
        )
        self.tool_threads = p.Gauge(
            "outlast_tool_threads",
            "Threads sync tools run on, busy (a hung tool's included) or idle.",
            ["state"],
            multiprocess_mode="livesum",
        )


_m: _Metrics | None = None
_busy_seen: tuple[float, float] | None = None  # (writer busy seconds, monotonic) when last refreshed
_tenants: frozenset[str] | None = frozenset()  # the tenants a label names (None: every one)


def enable(tenants: str = "") -> None:
    """Make the metric objects (once); from here on the hooks count. ``tenants``
    (``OUTLAST_METRICS_TENANTS``): the tenants named in the ``tenant`` label, comma-separated;
    ``*`` names every one (the operator accepts a label as unbounded as the tenants)."""
    global _m, _busy_seen, _tenants
    names = {name.strip() for name in tenants.split(",")} - {""}
    _tenants = None if "*" in names else frozenset(names)
    if _m is None:
        _m = _Metrics()
        _busy_seen = (0.0, time.monotonic())


def enabled() -> bool:
    return _m is not None


def process_dead(pid: int | None) -> None:
    """A worker process of a pool serving metrics died: its live gauges go with it."""
    if pid is not None and "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def serve(port: int, processes: int, tenants: str = "", host: str = "127.0.0.1") -> None:
    """Serve the endpoint on ``host``:``port`` from this process (``OUTLAST_METRICS_HOST``: the
    loopback interface unless told otherwise, so that nothing is exposed by default). With
    several processes, the children (spawned after this call) write to a directory made here,
    removed when this process exits. ``tenants``: as for ``enable``."""
    p = _client()
    registry = None
    if processes > 1:
        from prometheus_client import multiprocess

        directory = tempfile.mkdtemp(prefix="outlast-metrics-")
        atexit.register(shutil.rmtree, directory, True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        registry = p.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        enable(tenants)
    try:
        p.start_http_server(port, addr=host, registry=registry or p.REGISTRY)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {host} port {port}: {exc.strerror or exc}; "
            "choose another --metrics-port or --metrics-host"
        ) from None


# -- hooks: one line each where the engine already is -------------------------------------


def tenant_label(tenant: str | None) -> str:
    """A run's ``tenant`` label: the tenant if listed (or ``*``), ``other`` if not, ``""`` for none."""
    if tenant is None:
        return ""
    return tenant if _tenants is None or tenant in _tenants else "other"


def run_started(workflow: str, tenant: str | None) -> None:
    if _m is not None:
        _m.runs_started.labels(workflow, tenant_label(tenant)).inc()


def run_finished(workflow: str, state: str, tenant: str | None) -> None:
    if _m is not None:
        _m.runs_finished.labels(workflow, state, tenant_label(tenant)).inc()


def operation(tool: str, outcome: str, started: float) -> None:
    """An operation ended (``started``: its ``time.perf_counter()`` when it went live). Counted in
    the process's latency tally too, metrics or not (the dashboard's charts: ``outlast._latency``),
    in memory only: nothing is written on an operation's path."""
    seconds = time.perf_counter() - started
    TALLY.add(tool, seconds)
    if _m is not None:
        _m.operations.labels(tool, outcome).observe(seconds)


def dispatch_retried(tool: str) -> None:
    if _m is not None:
        _m.retries.labels(tool).inc()


def resolution(kind: str) -> None:
    if _m is not None:
        _m.resolutions.labels(kind).inc()


def in_doubt(tool: str) -> None:
    if _m is not None:
        _m.in_doubt.labels(tool).inc()


def lease_lost() -> None:
    if _m is not None:
        _m.leases_lost.inc()


def reclaimed(queue: str) -> None:
    if _m is not None:
        _m.reclaimed.labels(queue).inc()


def republished(queue: str) -> None:
    if _m is not None:
        _m.republished.labels(queue).inc()


def handed_back(queue: str) -> None:
    if _m is not None:
        _m.handed_back.labels(queue).inc()


def dead_lettered(queue: str) -> None:
    if _m is not None:
        _m.dead_letters.labels(queue).inc()


def journaled(workflow: str, size: int) -> None:
    """A run's append committed ``size`` bytes of entries (counted as written, never read back)."""
    if _m is not None:
        _m.journaled.labels(workflow).inc(size)


def commit_batch(size: int) -> None:
    if _m is not None:
        _m.batch.observe(size)


# -- gauges, refreshed by the worker every REFRESH seconds, never per operation -----------


def backlog(queue: str, length: int, lag: float) -> None:
    if _m is not None:
        _m.stream_length.labels(queue).set(length)
        _m.queue_lag.labels(queue).set(lag)


def run_gauges(in_doubt_open: int, stalled_seconds: float) -> None:
    if _m is not None:
        _m.in_doubt_open.set(in_doubt_open)
        _m.stalled.set(stalled_seconds)


PARKED = ("workflow_error", "program_changed", "resume_impossible", "paused")


def parked(rows: list[dict[str, Any]]) -> None:
    """The parked runs' gauge, per reason (summed over workflows; 0 for a reason none has)."""
    if _m is not None:
        for reason in PARKED:
            _m.parked.labels(reason).set(sum(r["n"] for r in rows if r["reason"] == reason))


def writer_busy(busy_seconds: float) -> None:
    """The writer's busy ratio since the last call, from its running total of busy seconds."""
    global _busy_seen
    now = time.monotonic()
    if _m is not None and _busy_seen is not None and now > _busy_seen[1]:
        _m.busy.set(min(1.0, (busy_seconds - _busy_seen[0]) / (now - _busy_seen[1])))
        _busy_seen = (busy_seconds, now)


def tool_threads(count: int, busy: int) -> None:
    if _m is not None:
        _m.tool_threads.labels("busy").set(busy)
        _m.tool_threads.labels("idle").set(count - busy)
