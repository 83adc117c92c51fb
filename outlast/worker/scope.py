"""``RunScope`` is what every part of one run shares, made once per generation of the run.

The executor makes it of ``RunTaken`` (what the run keeps over its generations, made once when the
worker takes it) each time it runs the workflow: the run's record, the app, the
``control`` the worker holds the run by, its ``writes``, the ``replayer`` over its journal, the
``secrets`` it knows to scrub, its flow ``gate``, its limits and its live output (masked). Each part
of the run (waits, requests, children, what it shows, the dispatcher, admission, the gap table) is
given the scope, plus the store families it uses and at most one or two things of its own. The scope
is frozen: a part reads it and never changes what another part sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from outlast._model import RunRecord
from outlast._secrets import Secrets
from outlast.action import LiveSink
from outlast.app import App
from outlast.queue import RateWindows
from outlast.settings import Settings
from outlast.store import Store
from outlast.worker.control import RunControl
from outlast.worker.flow import FlowGate
from outlast.worker.live import LiveOutput, Scrubbed
from outlast.worker.replayer import Journaled, Replayer
from outlast.worker.size import RunSize
from outlast.worker.writes import JournalWrites


@dataclass(frozen=True, slots=True)
class RunScope:
    """One generation of one run, as its parts see it."""

    record: RunRecord
    app: App
    control: RunControl
    writes: JournalWrites
    replayer: Replayer
    secrets: Secrets  # what the run's crossings met, scrubbed from what it stores and shows
    gate: FlowGate
    max_payload: int | None = None  # the largest value stored inline
    live: LiveSink | None = None  # where its live chunks go, masked (``Scrubbed``)
    callbacks: tuple[str | None, str | None] = (None, None)  # (OUTLAST_SECRET_KEY, OUTLAST_CALLBACK_URL)

    @property
    def run_id(self) -> str:
        return self.record.id


@dataclass(frozen=True, slots=True)
class RunTaken:
    """What a run keeps over its generations, made once when the worker takes it: each generation's
    ``RunScope`` is made of it (``scope``)."""

    app: App
    control: RunControl
    writes: JournalWrites
    gate: FlowGate
    db_now: datetime | None = None  # the schema clock, read at the claim
    max_payload: int | None = None
    live: LiveOutput | None = None  # the worker's
    callbacks: tuple[str | None, str | None] = (None, None)

    def scope(self, record: RunRecord, journal: Journaled, secrets: Secrets | None = None) -> RunScope:
        """A generation's scope: its replayer over ``journal``, its live output masked of ``secrets``."""
        secrets = secrets or Secrets(self.app, None)
        control, writes, app = self.control, self.writes, self.app
        at = self.db_now
        replayer = Replayer(record=record, control=control, writes=writes, journal=journal, db_now=at)
        sink = Scrubbed(self.live, secrets) if self.live is not None else None  # live chunks leave masked
        limit, gate = self.max_payload, self.gate
        return RunScope(record, app, control, writes, replayer, secrets, gate, limit, sink, self.callbacks)


def take(
    *,
    run: RunRecord,
    app: App,
    store: Store,
    db_now: datetime | None = None,
    control: RunControl | None = None,
    settings: Settings | None = None,
    windows: RateWindows | None = None,
    live: LiveOutput | None = None,
) -> RunTaken:
    """A run taken by a worker: its ``control`` (else one of its own), its writes in order (held
    entries first, what it journals counted) and its flow gate, with the ``settings`` it uses (None:
    no limits, nothing held, no callbacks)."""
    s = settings
    control = control or RunControl(run_id=run.id, token=run.fencing_token, cancel=run.cancel_requested)
    size = RunSize(size=store.size, run_id=run.id, workflow=run.workflow, warn=s.run_size_warn) if s else None
    writes = JournalWrites(
        journal=store.journal,
        messages=store.messages,
        control=control,
        hold=(s.hold_ms, s.hold_max) if s else (0.0, 0),  # (ms, entries) a held result waits at most
        size=size,
        payloads=(s.max_payload, s.max_referenced) if s else None,
    )
    gate = FlowGate(
        flow=store.flow, runs=store.runs, sweeps=store.sweeps, windows=windows, control=control, writes=writes
    )
    callbacks = (s.secret_key, s.callback_url) if s else (None, None)
    return RunTaken(app, control, writes, gate, db_now, s.max_payload if s else None, live, callbacks)
