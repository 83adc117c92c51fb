"""Offline replay checks whether the code of an app agrees with the journals of runs already made.

The workflow function runs against a run's journal exactly as a resuming worker runs it (the same
``Run``, replayer and dispatcher), under a ``RunControl`` marked offline and with a store
stand-in: every crossing the journal settles is served from it; the first one it does not settle
is the journal's end (``JournalEnd``), where a worker would go live, and nothing past it runs: no
tool, no reconciler, no write, no service. A crossing that asks for something else than the
journal holds is the first divergence (``ResumeImpossible``: the crossing, what the journal has,
what the code asks, and both arguments hashes). For a finished run, the code must also end the
run as it ended (its state and result). ``outlast replay`` and ``outlast.testing.replay_bundle``
call this; the runs come from a bundle (``outlast export``) or, read-only, through the client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from outlast import _bundle as bundle
from outlast._journal import Entry, canonical, first_bad_crossing
from outlast._model import FINAL_STATES, Partial, RunRecord, RunState
from outlast._secrets import Secrets
from outlast.app import App, Workflow
from outlast.errors import (
    ApprovalExpired,
    BudgetExhausted,
    Cancelled,
    DeadlineExceeded,
    InDoubt,
    InvalidInput,
    PartialRefused,
    RequestExpired,
    ResumeImpossible,
    ResumeRefused,
)
from outlast.producer import AsyncClient
from outlast.producer.checks import MAX_LIST
from outlast.store import FAMILIES, Store
from outlast.worker.control import JournalEnd, RunControl, Suspended
from outlast.worker.flow import FlowGate
from outlast.worker.replayer import Journaled
from outlast.worker.run import Run, RunEngine
from outlast.worker.scope import RunTaken
from outlast.worker.writes import JournalWrites

UNFINISHED = tuple(s for s in RunState if s not in FINAL_STATES)  # the runs a deploy would resume
_FAR = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)
_STOPPED = {RunState.TIMED_OUT, RunState.EXHAUSTED, RunState.CANCELLED}  # ended from outside


class Verdict(StrEnum):
    AGREES = "agrees"  # the code asks what the journal holds, to its end
    DIVERGES = "diverges"  # the code asks something else at a crossing, or ends otherwise
    ALTERED = "altered"  # the journal's chain does not verify: nothing to compare with


@dataclass(frozen=True)
class Divergence:
    """A ``Divergence`` names the first crossing where the code and the journal part: what each
    holds there."""

    crossing: int  # the journal entry's number (one past the last for what comes after the end)
    operation: str | None
    journal: str
    code: str
    journal_hash: str | None = None  # the arguments hash journaled (a call, an approval)
    code_hash: str | None = None  # the arguments hash of what the code asks

    def __str__(self) -> str:
        def hashed(h: str | None) -> str:
            return f"  [arguments hash {h[:16]}]" if h else ""

        at = f"{self.operation}, " if self.operation else ""
        return (
            f"first divergence at {at}crossing {self.crossing} of the journal\n"
            f"  journal has  {self.journal}{hashed(self.journal_hash)}\n"
            f"  code asks    {self.code}{hashed(self.code_hash)}"
        )


@dataclass(frozen=True)
class Report:
    """A ``Report`` describes one run replayed: its verdict, where the replay stopped, and the
    divergence if any."""

    run_id: str
    workflow: str
    state: str
    entries: int
    verdict: Verdict
    where: str  # where the replay stopped, in words
    program_journaled: str | None = None  # the program the run was admitted with
    program: str | None = None  # the program of the code replayed
    divergence: Divergence | None = None

    @property
    def agrees(self) -> bool:
        return self.verdict == Verdict.AGREES

    def __str__(self) -> str:
        head = f"run {self.run_id} ({self.workflow}, {self.state}, {self.entries} entries): {self.verdict}"
        changed = ""
        if self.program and self.program_journaled and self.program != self.program_journaled:
            changed = f"\n  program      {self.program_journaled} -> {self.program}"
        body = f"\n{self.divergence}" if self.divergence else f"\n  {self.where}"
        return head + changed + body


class _Bundled:
    """The store an offline replay is given. Its clock is far ahead (a journaled timer has
    passed; one not journaled is the journal's end anyway), no decision exists beyond the journal,
    and any other call (a write, a read of live state such as ``run.budget()``) ends the replay."""

    async def db_now(self) -> datetime:
        return _FAR

    async def approval(self, run_id: str, op_id: str) -> None:
        return None

    async def request(self, run_id: str, op_id: str) -> None:  # no answer beyond the journal either
        return None

    def __getattr__(self, name: str) -> Any:
        if name in FAMILIES:  # a family of the store (``store.sweeps``): the same answers
            return self

        async def beyond(*args: Any, **kwargs: Any) -> Any:
            raise JournalEnd(None, f"the database ({name}): live state, which no journal holds")

        return beyond


async def replay_run(
    app: App, record: RunRecord, entries: list[Entry], *, secret_key: str | None = None
) -> Report:
    """Replay one run of ``app`` from its record and journal (the first ``record.journal_len``
    entries: a journal read after its record may have grown). Needs the workers' secret key when
    the app declares secret arguments (their hashes are compared)."""
    entries = entries[: record.journal_len]
    wf = app.workflows.get(record.workflow)
    facts: dict[str, Any] = {
        "run_id": record.id,
        "workflow": record.workflow,
        "state": str(record.state),
        "entries": len(entries),
        "program_journaled": record.program,
        "program": wf.program if wf is not None else None,
    }
    if wf is None:
        missing = Divergence(1, None, f"a run of workflow '{record.workflow}'", "no such workflow in the app")
        return Report(**facts, verdict=Verdict.DIVERGES, where="no workflow", divergence=missing)
    bad = first_bad_crossing(entries, record.journal_head)
    if bad is not None:
        where = f"the journal's chain breaks at crossing #{bad}; inspect it with: outlast verify {record.id}"
        return Report(**facts, verdict=Verdict.ALTERED, where=where)
    control = RunControl(run_id=record.id, token=record.fencing_token, offline=True)
    secrets = Secrets(app, secret_key)
    store = cast(Store, _Bundled())
    writes = JournalWrites(
        journal=store.journal, messages=store.messages, control=control
    )  # never reached: nothing is written offline
    gate = FlowGate(
        flow=store.flow, runs=store.runs, sweeps=store.sweeps, windows=None, control=control, writes=writes
    )
    scope = RunTaken(app, control, writes, gate).scope(record, Journaled(entries), secrets)
    ctx = Run(scope, store)
    end = len(entries) + 1
    try:
        state, result, error = await _ending(wf, ctx, record.input)
        result = secrets.scrub(result)  # as the executor stores it
    except JournalEnd as stop:
        if record.state not in FINAL_STATES or record.state in _STOPPED:
            at = f" at {stop.op_id}" if stop.op_id else ""
            where = f"journal end{at}: next the code asks {stop.asks} (live)"
            return Report(**facts, verdict=Verdict.AGREES, where=where)
        ended = Divergence(end, stop.op_id, f"nothing more (the run ended {record.state})", stop.asks)
        return Report(**facts, verdict=Verdict.DIVERGES, where="past the end", divergence=ended)
    except ResumeImpossible as exc:
        split = Divergence(
            exc.crossing, exc.operation, exc.journal, exc.program, exc.journal_hash, exc.program_hash
        )
        where = f"at {exc.operation or 'the end'}: the code asks {exc.program}"
        return Report(**facts, verdict=Verdict.DIVERGES, where=where, divergence=split)
    except InDoubt as exc:
        where = f"journal end: {exc.operation_id} ({exc.tool}) is in doubt; the run waits for its resolution"
        return Report(**facts, verdict=Verdict.AGREES, where=where)
    except (ResumeRefused, Suspended) as exc:
        return Report(**facts, verdict=Verdict.AGREES, where=f"journal end: the run waits ({exc})")
    return _compared(facts, record, end, state, result, error)


async def _ending(wf: Workflow, ctx: Run, run_input: dict[str, Any]) -> tuple[RunState, Any, str | None]:
    """Run the workflow to its end as the executor does: the final state, result and error type
    it would commit (compensations included, served from the journal)."""
    end = RunEngine(ctx)  # the engine's side of the run
    try:
        try:
            value = await wf.fn(ctx, **run_input)
        except (Exception, Cancelled):
            await end.ended()
            raise
        await end.ended()
        end.check_consumed()
        if isinstance(value, Partial):
            if not wf.accepts_partial:
                raise PartialRefused(f"workflow '{wf.name}' returned a Partial but does not accept them")
            return RunState.PARTIAL, json.loads(canonical(value.result())), None
        return RunState.SUCCEEDED, json.loads(canonical(value)), None
    except (ResumeRefused, InDoubt):
        raise
    except Cancelled:
        undone = await end.compensate() if "cancel" in wf.compensate_on else None
        return RunState.CANCELLED, undone, None
    except (DeadlineExceeded, ApprovalExpired, RequestExpired) as exc:
        return RunState.TIMED_OUT, None, type(exc).__name__
    except BudgetExhausted as exc:
        return RunState.EXHAUSTED, None, type(exc).__name__
    except Exception as exc:
        undone = await end.compensate() if "failure" in wf.compensate_on else None
        return RunState.FAILED, undone, type(exc).__name__


def _compared(
    facts: dict[str, Any], record: RunRecord, end: int, state: RunState, result: Any, error: str | None
) -> Report:
    """The code ended the run: for a finished run, as it ended (state, result, error type); an
    unfinished one would end so once resumed."""
    said = f"{state} with {_short(result)}" + (f" ({error})" if error else "")
    if record.state not in FINAL_STATES:
        return Report(
            **facts, verdict=Verdict.AGREES, where=f"journal end: the code then ends the run {said}"
        )
    was_error = (record.error or {}).get("type")
    stopped = state in (RunState.TIMED_OUT, RunState.EXHAUSTED) and record.state in _STOPPED | {
        RunState.PARTIAL
    }
    if stopped or (state == record.state and result == record.result and error == was_error):
        return Report(**facts, verdict=Verdict.AGREES, where=f"the end: {said}, as journaled")
    was = f"{record.state} with {_short(record.result)}" + (f" ({was_error})" if was_error else "")
    ended = Divergence(end, None, f"the end: {was}", f"the end: {said}")
    return Report(**facts, verdict=Verdict.DIVERGES, where="the end", divergence=ended)


def _short(value: Any, room: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= room else text[: room - 1] + "…"


async def replay_bundle(path: Path, app: App, *, secret_key: str | None = None) -> Report:
    """Replay the run of a bundle written by ``outlast export`` (its directory)."""
    record, entries = bundle.read(path)
    return await replay_run(app, record, entries, secret_key=secret_key)


async def replay_workflow(
    client: AsyncClient,
    app: App,
    workflow: str,
    *,
    states: tuple[str, ...] = UNFINISHED,
    since: datetime | timedelta | None = None,
    secret_key: str | None = None,
) -> list[Report]:
    """Replay the runs of ``workflow`` in ``states`` (by default every unfinished one: those a
    deploy would resume), read through the client and never written to, oldest first."""
    if workflow not in app.workflows:
        raise InvalidInput(
            f"the app has no workflow '{workflow}' (it has: {', '.join(sorted(app.workflows))})"
        )
    runs: list[RunRecord] = []
    for state in states:
        found = await client.runs(state, MAX_LIST, workflow=workflow, since=since)
        if len(found) == MAX_LIST:
            raise InvalidInput(
                f"{MAX_LIST} or more runs of '{workflow}' are {state}, more than one replay reads: "
                f"narrow it to the newest with --since (runs created since then)"
            )
        runs += found
    runs.sort(key=lambda r: r.created_at)
    return [await replay_run(app, run, await client.journal(run.id), secret_key=secret_key) for run in runs]


def table(reports: list[Report]) -> str:
    """One line per run (run, state, entries, verdict, where it stopped), then each divergence."""
    if not reports:
        return "no run to replay"
    rows = [("RUN", "STATE", "ENTRIES", "VERDICT", "WHERE")]
    rows += [(r.run_id, r.state, str(r.entries), str(r.verdict), r.where[:80]) for r in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[4] for row in rows]
    for r in reports:
        if not r.agrees:
            lines += ["", str(r)]
    bad = sum(not r.agrees for r in reports)
    lines += ["", f"{len(reports)} runs replayed: {len(reports) - bad} agree, {bad} do not"]
    return "\n".join(line.rstrip() for line in lines)
