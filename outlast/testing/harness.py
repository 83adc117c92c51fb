"""``Harness`` puts one app on a private schema and key prefix of real servers (see the package doc)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, MutableMapping
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import redis

from outlast._callbacks import deliver, sign, url
from outlast._captured import requests, shown_data
from outlast._model import Answered, Receipt, RunRecord
from outlast.app import App
from outlast.producer import Client
from outlast.queue import Queue
from outlast.settings import Settings, env_var
from outlast.store import Store
from outlast.testing.clock import move_clock
from outlast.testing.worker import CrashPoint, InProcessWorker, check_point, run_blocking

# Short leases and a fast sweeper: a takeover after a crash costs about a lease, a woken wait
# about a sweep. Any of them can be given to ``outlast_harness(app, lease_ttl=...)``.
DEFAULTS: dict[str, Any] = {"lease_ttl": 2.0, "sweep_interval": 0.2, "republish_after": 1.0, "grace": 1.0}

# The settings a worker process is given, as OUTLAST_* variables.
_PROCESS_SETTINGS = (
    "database_url",
    "redis_url",
    "schema",
    "prefix",
    "lease_ttl",
    "sweep_interval",
    "republish_after",
    "grace",
    "max_attempts",
    "concurrency",
    "store_retry",
    "max_payload",
    "secret_key",
    "max_inbox",
    "max_inbox_run",
    "callback_url",
)


class Replacement:
    """A ``Replacement`` replaces one entry of an App's registry until ``restore()`` (or the end of
    a ``with``)."""

    def __init__(self, registry: MutableMapping[str, Any], key: str, new: Any) -> None:
        self.registry, self.key = registry, key
        self.original = registry[key]
        self.registry[key] = new
        self.restored = False

    def restore(self) -> None:
        if not self.restored:
            self.restored = True
            self.registry[self.key] = self.original

    def __enter__(self) -> Replacement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


class Harness:
    """``Harness`` puts one app on a private schema and key prefix of real servers; see the package doc.

    ``client`` is a ``Client`` on them (the app given: an unknown workflow is refused at enqueue).
    """

    def __init__(
        self, app: App, settings: Settings, *, app_spec: str | None = None, logs: Path | None = None
    ) -> None:
        if not (settings.database_url and settings.redis_url):
            raise ValueError("a Harness needs both URLs in its settings")
        self.app = app
        self.settings = settings
        self.app_spec = app_spec
        self.database_url: str = settings.database_url
        self.redis_url: str = settings.redis_url
        self.schema = settings.schema
        self.prefix = settings.prefix
        self.logs = logs  # where worker processes write their output (a temporary dir if None)
        self._worker: InProcessWorker | None = None
        self._swaps: list[Replacement] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._client: Client | None = None

    @classmethod
    def create(
        cls,
        app: App,
        database_url: str,
        redis_url: str,
        *,
        app_spec: str | None = None,
        logs: Path | None = None,
        **settings: Any,
    ) -> Harness:
        """A harness on a fresh schema and prefix of the given servers, migrated and ready."""
        tag = uuid.uuid4().hex[:12]
        s = Settings(
            database_url=database_url,
            redis_url=redis_url,
            schema=f"outlast_test_{tag}",
            prefix=f"outlast-test-{tag}",
            **{**DEFAULTS, **settings},
        )
        return cls(app, s, app_spec=app_spec, logs=logs).open()

    def open(self) -> Harness:
        """Create the schema (``Store.migrate``) and the client."""

        async def prepare() -> None:
            store = Store(self.database_url, self.schema, max_size=1)
            await store.open(check=False)
            try:
                await store.migrate()
            finally:
                await store.close()
            queue = Queue(self.redis_url, self.prefix, connections=2)
            try:
                # A fresh prefix looks like a Redis that lost its data; nothing can have been lost
                # yet: say so now, or the first worker warns of it.
                await queue.lost_data()
            finally:
                await queue.close()

        run_blocking(prepare)
        self._client = Client(settings=self.settings, app=self.app)
        return self

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the harness is not open (Harness.create, or open())")
        return self._client

    # -- workers ------------------------------------------------------------------------

    def start_worker(self, queues: list[str] | None = None) -> None:
        """Start the in-process worker (a real ``Worker`` on its own thread and loop)."""
        if self._worker is not None:
            raise RuntimeError("the in-process worker is already running")
        w = InProcessWorker(self.app, self.settings, queues or self.app.queues(self.settings.queue))
        w.start()
        self._worker = w

    def stop_worker(self) -> None:
        """Stop the in-process worker as on SIGTERM: its running runs finish within the grace
        period or are handed over to the next worker."""
        w, self._worker = self._worker, None
        if w is not None:
            w.stop()

    def crash_at(self, point: str, tool: str | None = None, timeout: float = 60.0) -> None:
        """Make the in-process worker crash at the first crossing of ``point`` (one of
        ``outlast._failpoints.POINTS``; for ``tool`` only, if given), wait until it did, and stop
        that worker. Start a worker again to resume: it takes the run over once its lease expired.

        The run's execution ends there with ``Crashed`` (a BaseException): no write for the run
        follows, its lease is left to expire and its stream entry unacknowledged, as after a kill.
        Unlike a kill, the process lives on: the workflow's own ``finally`` blocks run, calls it
        made in parallel (``gather``) may still finish, and stopping the worker hands its other
        runs over. For a real kill, see ``kill_at``."""
        check_point(point)
        with CrashPoint(point, tool) as crash:
            if self._worker is None:
                self.start_worker()
            until = time.monotonic() + timeout
            while not crash.hit.wait(0.05):
                self._raise_worker_error()
                if time.monotonic() > until:
                    where = f"{point}:{tool}" if tool else point
                    raise AssertionError(f"the in-process worker did not reach {where} within {timeout:g}s")
        self.stop_worker()

    def kill_at(self, point: str, tool: str | None = None, timeout: float = 60.0) -> None:
        """Start a real worker process armed (``OUTLAST_FAILPOINTS``) to SIGKILL itself at
        ``point`` (for ``tool`` only, if given), and wait until it did. No cleanup of any kind
        runs. The process imports the app by ``app_spec`` (``MODULE:ATTRIBUTE``, found from the
        app's workflows when not given) and gets this process's environment and ``sys.path``;
        tools replaced here are not replaced there."""
        check_point(point)
        if self._worker is not None:
            raise RuntimeError("stop_worker() first: the in-process worker would take the run instead")
        spec = self.app_spec or _find_spec(self.app)
        if self.logs is None:
            self.logs = Path(tempfile.mkdtemp(prefix=f"{self.schema}-"))
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"worker-{len(self._procs)}.log"
        args = [sys.executable, "-m", "outlast", "worker", spec, "-q", self.settings.queue]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args,
                env=self._process_env(OUTLAST_FAILPOINTS=f"{point}:{tool}" if tool else point),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._procs.append(proc)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(
                f"the worker process did not reach {point} within {timeout:g}s; its output:\n{_tail(log)}"
            ) from None
        if rc != -signal.SIGKILL:
            raise AssertionError(f"the worker process exited with {rc}, not killed at {point}:\n{_tail(log)}")

    def _process_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
        for name in _PROCESS_SETTINGS:
            value = getattr(self.settings, name)
            if value is not None:
                env[env_var(name)] = str(value)
        env["OUTLAST_LOG_FORMAT"] = "json"
        env["PYTHONPATH"] = os.pathsep.join([os.getcwd(), *(p for p in sys.path if p)])
        env.update(extra)
        return env

    def _raise_worker_error(self) -> None:
        if self._worker is not None:
            self._worker.raise_error()

    # -- the app ------------------------------------------------------------------------

    def replace_tool(self, name: str, fn: Callable[..., Any]) -> Replacement:
        """Serve tool ``name`` with ``fn`` until the test ends (or the ``with`` block does:
        ``with h.replace_tool(...):``). Calls are still checked against the original's type
        hints, and its effect, idempotency, retry and timeout stand. In-process workers only."""
        tool = self.app.get_tool(name)
        swap = Replacement(self.app.tools, name, dataclasses.replace(tool, fn=fn))
        self._swaps.append(swap)
        return swap

    def replace_reconciler(self, tool: str, fn: Callable[[dict[str, Any], Any], Any]) -> Replacement:
        """Ask ``fn`` instead of the registered reconciler of ``tool``, as ``replace_tool``."""
        if tool not in self.app.reconcilers:
            raise KeyError(f"no reconciler registered for tool '{tool}'")
        swap = Replacement(self.app.reconcilers, tool, fn)
        self._swaps.append(swap)
        return swap

    # -- requests -----------------------------------------------------------------------

    def requests(self, run_id: str) -> list[dict[str, Any]]:
        """The run's requests waiting for an answer (``Client.requests``)."""
        return self.client.requests(run_id)

    def respond(self, run_id: str, request_id: str, value: Any, *, by: str | None = None) -> Answered:
        """Answer a request of the run as ``by`` (``Client.respond``: checked, the first valid
        answer stands; the same again is accepted, ``again`` True)."""
        return self.client.respond(run_id, request_id, value, by=by)

    def wait_for_request(self, run_id: str, request_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the run waits on its request ``request_id``; return the request."""
        until = time.monotonic() + timeout
        while True:
            self._raise_worker_error()
            run = self.client.status(run_id)
            pending = {r["id"]: r for r in self.client.requests(run_id)}
            if run.state == "waiting" and run.reason == "request" and request_id in pending:
                return pending[request_id]
            if time.monotonic() > until:
                raise AssertionError(f"run {run_id} is {run.state}, not waiting on request {request_id}")
            time.sleep(0.05)

    # -- time ---------------------------------------------------------------------------

    def advance(self, seconds: float) -> list[str]:
        """Make ``seconds`` pass: the schema's clock (``outlast_now()``, which every claim, lease,
        timer, approval expiry, deadline and delayed start reads) moves on, and what is then due
        fires at the next sweep (``sweep_interval``). Returns the ids of the unfinished runs with a
        due time, each given an event of kind ``advanced``.

        Nothing stored is rewritten: no journal entry, no due time. ``run.now()`` reads the same
        clock, from the run's next claim on: a run a worker holds meanwhile (its lease is renewed
        on the moved clock) sees the new time once it resumes after its next wait."""
        with self._connect() as conn:
            return move_clock(conn, seconds)

    # -- messages -----------------------------------------------------------------------

    def send(self, run_id: str, channel: str, payload: Any, message_id: str | None = None) -> Receipt:
        """Send a message to the run (``Client.send``): kept until it takes it, the run woken."""
        return self.client.send(run_id, channel, payload, message_id)

    def fire_callback(
        self, url: str, body: Any, *, idempotency_key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """POST ``body`` (JSON; bytes or text as they are) to a callback URL a run handed out
        (``run.callback``), as the callbacks endpoint takes it: (HTTP status, answer). Needs
        ``secret_key`` in the harness's settings, as the workers do."""
        if isinstance(body, bytes | str):
            raw, kind = (body if isinstance(body, bytes) else body.encode()), "text/plain"
        else:
            raw, kind = json.dumps(body).encode(), "application/json"
        token = url.rstrip("/").rsplit("/", 1)[-1]
        client = self.client
        return client._call(deliver(client.aio, token, raw, kind, idempotency_key))

    def callback_url(self, run_id: str, channel: str) -> str:
        """The callback URL the run handed out for ``channel`` (its latest ``run.callback``),
        signed again from its journal as a replay signs it: what the tool it was given to holds,
        where the journal, the API and the logs show it masked (``.../[secret]``)."""
        made = [e for e in self.journal(run_id) if e["kind"] == "callback" and e["channel"] == channel]
        if not made:
            raise AssertionError(f"run {run_id} made no callback for channel {channel!r}")
        at = datetime.fromisoformat(made[-1]["expires_at"])
        s = self.client.settings
        return url(s.callback_url, sign(s.secret_key, run_id, channel, at, made[-1].get("born")))

    # -- what happened ------------------------------------------------------------------

    def wait(self, run_id: str, *states: str, timeout: float = 30.0) -> RunRecord:
        """Wait until the run is in one of ``states`` (final, when none is given); return it.
        Raises what the in-process worker died of, if it did."""
        until = time.monotonic() + timeout
        while True:
            self._raise_worker_error()
            run = self.client.status(run_id)
            if run.state in states if states else run.final:
                return run
            if time.monotonic() > until:
                wanted = " or ".join(states) or "final"
                why = f" ({run.reason})" if run.reason else ""
                raise AssertionError(f"run {run_id} is {run.state}{why} after {timeout:g}s, not {wanted}")
            time.sleep(0.05)

    def journal(self, run_id: str) -> list[dict[str, Any]]:
        """The run's journal entries, each as stored: ``seq``, ``kind``, ``op`` and its data
        (an intention's ``tool``, ``args``, ``key``; a result's ``ok`` or ``error`` and ``how``...);
        a capture with its request whole (``request``), as ``outlast status --op`` shows it."""
        entries = self.client.journal(run_id)
        whole = requests(entries)
        return [shown_data(e, whole) for e in entries]

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events (``kind``, ``detail``, ``at``), oldest first."""
        return self.client.events(run_id)

    def state(self, run_id: str, key: str | None = None) -> Any:
        """What the run shows (``run.set_state``): ``{key: value}``, or one key's value (None if
        never set). Versions: ``h.client.state(run_id)``."""
        if key is not None:
            got = self.client.state(run_id, key)
            return None if got is None else got.value
        return {k: v.value for k, v in self.client.state(run_id).items()}

    def emitted(self, run_id: str) -> list[tuple[str, Any]]:
        """The run's custom events (``run.emit``), oldest first: (kind without ``custom:``, data)."""
        return [
            (e["kind"][7:], e["detail"]["data"])
            for e in self.events(run_id)
            if e["kind"].startswith("custom:")
        ]

    def stream(self, run_id: str, timeout: float = 30.0) -> list[Any]:
        """The run's live chunks still kept, once it is final (waited for up to ``timeout``): each
        chunk's data, in order. Live output is at most once: a worker killed loses its unsent chunks."""
        self.wait(run_id, timeout=timeout)
        return [item.data for item in self.client.stream(run_id) if not isinstance(item, RunRecord)]

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run a statement in the private schema (for the tables of the test's own world)."""
        with self._connect() as conn:
            cur = conn.execute(statement.encode(), params or None)
            return cur.fetchall() if cur.description else []

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.database_url, autocommit=True, options=f"-c search_path={self.schema}")

    # -- the end ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers, put replaced tools back, drop the schema and the keys (each step
        even if one before it failed; the first failure is raised at the end). Idempotent."""
        errors: list[BaseException] = []
        for step in (self.stop_worker, self._kill_processes, self._restore, self._close_client, self._drop):
            try:
                step()
            except BaseException as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def _kill_processes(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)
        self._procs.clear()

    def _restore(self) -> None:
        for swap in reversed(self._swaps):
            swap.restore()
        self._swaps.clear()

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def _drop(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE'.encode())
        r = redis.Redis.from_url(self.redis_url)
        try:
            keys = list(r.scan_iter(f"{self.prefix}:*"))
            if keys:
                r.delete(*keys)
        finally:
            r.close()

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _find_spec(app: App) -> str:
    """``MODULE:ATTRIBUTE`` of the app, for a worker process: the module its workflows are
    defined in first, then any imported module holding it."""
    homes = [wf.fn.__module__ for wf in app.workflows.values()]
    names = [*dict.fromkeys(homes), *(n for n in list(sys.modules) if n not in homes)]
    for name in names:
        module = sys.modules.get(name)
        if module is None or name == "__main__":
            continue
        for attr, value in list(vars(module).items()):
            if value is app:
                return f"{name}:{attr}"
    raise RuntimeError(
        "the app is not a module-level name of an importable module: "
        "pass app_spec='MODULE:ATTRIBUTE' to outlast_harness(...)"
    )


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
