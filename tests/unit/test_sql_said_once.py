"""SQL the statements repeated is said once: a run's event is written by ``outlast_event``
(migration 0031), never by a statement's own ``INSERT INTO events``; the fenced journal append is
written once, in parts (``-- part:``, ``queries.py``) that the journal's ``append`` and the message
``take`` take in; a fenced change's lost-acknowledgement tail is the run with its event, then its
re-check (``outlast_redone``), two calls."""

from __future__ import annotations

import re
from importlib import resources

from outlast.store.queries import Q

# What the fenced append spelled, once each: the run row moved (what it sets, what it is fenced
# by) and the entries written with their answer.
APPEND = (
    "journal_head = %(hash)s, journal_len = %(seq)s, attempts = 1, updated_at = now()",
    "journal_len = %(seq)s - cardinality(%(kinds)s::text[])",
    "WITH ORDINALITY AS e(kind, op_id, body, hash, n)",
    "AND runs.fencing_token = %(token)s",
)


def bare(sql: str) -> str:
    """The text with its whitespace made one space, and none beside a parenthesis or a comma: a
    spelling comes back however it is laid out."""
    return re.sub(r" ?([(),]) ?", r"\1", re.sub(r"\s+", " ", sql))


def files() -> dict[str, str]:
    """Each ``sql/*.sql`` file's text as written (its parts not taken in)."""
    folder = resources.files("outlast.store").joinpath("sql")
    return {f.name: bare(f.read_text()) for f in folder.iterdir() if f.name.endswith(".sql")}


def callers(fn: str) -> list[str]:
    return [name for name, q in Q.items() if re.search(rf"\b{fn}\(", q)]


def test_a_runs_event_is_written_by_outlast_event_only() -> None:
    writes = {name for name, text in files().items() if re.search(r"INSERT INTO events\b", text, re.I)}
    assert not writes, f"an event written by its own INSERT in {sorted(writes)}: call outlast_event (0031)"
    assert len(callers("outlast_event")) >= 19, callers("outlast_event")


def test_the_fenced_append_is_written_once_and_taken_whole_by_the_take() -> None:
    text = files()
    for fragment in APPEND:
        where = {name: t.count(bare(fragment)) for name, t in text.items() if bare(fragment) in t}
        assert where == {"journal.sql": 1}, f"{fragment!r} written in {where}: take in journal.sql's parts"
        for name in ("append", "take"):
            assert bare(fragment) in bare(Q[name]), f"{name} lacks {fragment!r}"
    assert not [name for name, q in Q.items() if "{{" in q], "a part left untaken"


def test_each_lost_acknowledgement_tail_is_the_run_with_its_event_then_its_recheck() -> None:
    # in bare text, its comments left out
    tail = re.compile(
        r"SELECT id AS run_id(?:,\w+)? FROM r,outlast_event\(id,(?:(?!UNION ALL).)*?\)"
        r"UNION ALL SELECT id(?:,\w+)? FROM outlast_redone\("
    )
    redone = callers("outlast_redone")
    assert len(redone) >= 10, redone
    spelled = [name for name in redone if not tail.search(bare(re.sub(r"--[^\n]*", "", Q[name])))]
    assert not spelled, f"a lost-acknowledgement tail spelled otherwise in {spelled}"


def test_the_schema_clock_is_spelled_once_and_read_by_every_statement_of_due_times() -> None:
    clock = bare("(SELECT at FROM outlast_now())")
    where = {name: t.count(clock) for name, t in files().items() if clock in t}
    assert where == {"clock.sql": 1}, f"the clock spelled out in {where}: say {{{{now}}}} (clock.sql's part)"
    readers = [name for name, q in Q.items() if clock in bare(q)]
    assert len(readers) >= 40 and {"claim", "renew"} <= set(readers), readers
