"""``outlast export RUN -o DIR`` exports a debug bundle a person can read without a database.

events.jsonl (what happened), journal.jsonl (every crossing: its entry, its hash and when it
was journaled; captured requests among them), last_state.json (the run record, with its workflow,
input, program and outcome, and its status), tool_calls.csv (ts, tool, operation, input_hash,
latency_ms, status, error; a cell that a spreadsheet would take for a formula starts with ``'``)
and env.txt (versions and identities); artifacts.jsonl where the run saved artifacts (each one's
name, operation, SHA-256, size, media type, and, up to ``BUNDLED_BYTES`` (64 KiB), its bytes as
``base64``: a larger one is listed, not carried). The files are written 0600, in a
directory made 0700 when the export creates it: a bundle is for the people who can read the
database. ``read`` gives the run record and the journal back, for ``outlast replay``.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import platform
import sys
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from outlast._captured import requests
from outlast._journal import Entry
from outlast._model import RunRecord
from outlast._payloads import entry_of_line, held
from outlast._status import describe
from outlast.errors import InvalidInput
from outlast.producer import AsyncClient
from outlast.store import SCHEMA_VERSION

FILES = ("events.jsonl", "journal.jsonl", "last_state.json", "tool_calls.csv", "env.txt")
BUNDLED_BYTES = 64 * 1024  # an artifact up to this size travels in the bundle; a larger one is listed

# A spreadsheet takes a cell that starts with one of these for a formula: an error message a
# tool echoed from elsewhere could run one on the machine of whoever opens the bundle.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    """``value`` as a CSV cell that a spreadsheet shows as text: a string that would start a
    formula gets a leading ``'`` (OWASP's advice on CSV injection); anything else as is."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def _private(path: Path) -> TextIO:
    """``path`` opened for writing, readable by its owner only (0600, an existing file too); a
    symbolic link planted in its place is refused, never followed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    return open(fd, "w", newline="", encoding="utf-8")


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)


async def export(client: AsyncClient, run_id: str, out: Path) -> list[Path]:
    """Write the bundle of ``run_id`` into ``out`` (created); return the files written."""
    texts = await contents(client, run_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.mkdir(mode=0o700, exist_ok=True)
    files = []
    for name, text in texts.items():
        with _private(out / name) as f:
            f.write(text)
        files.append(out / name)
    return files


async def contents(client: AsyncClient, run_id: str) -> dict[str, str]:
    """The bundle of ``run_id``, file name to text, in memory (the dashboard zips it as is)."""
    info = await describe(client, run_id)
    entries = await client.journal(run_id)
    times = await client.journal_times(run_id)
    out = dict.fromkeys(FILES, "")
    out["events.jsonl"] = _jsonl(await client.events(run_id))
    whole = requests(entries)  # a capture stored by delta also carries its request whole
    out["journal.jsonl"] = _jsonl(
        [
            {**e.data, **_whole(e, whole), **held(e), "hash": e.hash, "journaled_at": times.get(e.seq)}
            for e in entries
        ]
    )
    if info["artifacts"]:
        out["artifacts.jsonl"] = _jsonl([await _artifact(client, run_id, a) for a in info["artifacts"]])
    out["last_state.json"] = json.dumps(info, indent=2, ensure_ascii=False, default=str) + "\n"
    started: dict[str, tuple[Any, dict[str, Any]]] = {}
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["ts", "tool", "operation", "input_hash", "latency_ms", "status", "error"])
    for e in entries:
        d = e.data
        if e.kind == "intention" and e.op_id is not None:
            started[e.op_id] = (times.get(e.seq), d)
        elif e.kind == "result" and "tool" in d and e.op_id is not None:
            # A read journals no intention: its result says what was asked, and when.
            started[e.op_id] = (datetime.fromisoformat(d["started"]), d)
        if e.kind in ("result", "in_doubt", "abandoned") and e.op_id in started:
            at, intent = started.pop(e.op_id)
            end = None if "tool" in d else times.get(e.seq)  # a held read's commit is later
            latency = round((end - at).total_seconds() * 1000, 1) if at and end else ""
            status = e.kind if e.kind != "result" else ("error" if "error" in d else "ok")
            error = d.get("error", {}).get("message", "") if e.kind == "result" else d.get("why", "")
            w.writerow(map(_cell, [at, intent["tool"], e.op_id, intent["args_hash"], latency, status, error]))
    for op, (at, intent) in started.items():
        w.writerow(map(_cell, [at, intent["tool"], op, intent["args_hash"], "", "pending", ""]))
    out["tool_calls.csv"] = f.getvalue()
    run = info["run"]
    out["env.txt"] = (
        f"outlast {metadata.version('outlast')}\nschema {client.settings.schema} v{SCHEMA_VERSION}\n"
        f"python {sys.version.split()[0]} on {platform.platform()}\n"
        f"workflow {run['workflow']} program {run['program']}\n"
        f"chain head {run['journal_head']} ({run['journal_len']} entries, "
        f"{'verifies' if info['chain']['verifies'] else 'ALTERED at #' + str(info['chain']['bad'])})\n"
    )
    return out


async def _artifact(client: AsyncClient, run_id: str, a: dict[str, Any]) -> dict[str, Any]:
    """An artifact's line: its index row, with its bytes (base64) if it is small enough to carry."""
    if a["size"] > BUNDLED_BYTES:
        return a
    return {**a, "base64": base64.b64encode(await client.artifact(run_id, a["name"], a["op_id"])).decode()}


def _whole(e: Entry, whole: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A capture by delta's request whole, as ``request`` beside what is stored (``read`` drops it)."""
    shown = whole.get(e.seq, {})
    return {"request": shown["request"]} if "rest" in e.fields and "request" in shown else {}


_TIMES = ("lease_expires_at", "deadline", "created_at", "updated_at", "finished_at", "start_at", "started_at")


def read(path: Path) -> tuple[RunRecord, list[Entry]]:
    """The run record and the journal a bundle holds (``path``: its directory). Each entry's
    body is rebuilt from its line; ``first_bad_crossing`` then says whether the bundle's journal
    is the one its run journaled (its hashes, and the run's chain head)."""
    try:
        state = json.loads((path / "last_state.json").read_text(encoding="utf-8"))
        lines = (path / "journal.jsonl").read_text(encoding="utf-8").splitlines()
        row = dict(state["run"])
        for k in _TIMES:
            if row.get(k):
                row[k] = datetime.fromisoformat(row[k])
        entries = []
        for line in lines:
            data = json.loads(line)
            digest_ = data.pop("hash")
            data.pop("journaled_at", None)
            if "rest" in data:  # a capture by delta: its request whole is shown, not stored
                data.pop("request", None)
            entries.append(entry_of_line(data, digest_))
        return RunRecord.from_row(row), entries
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        what = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidInput(f"{path} is not a bundle made by `outlast export`: {what}") from None
