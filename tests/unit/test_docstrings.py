"""Every module docstring under outlast/ opens with one plain sentence, then the detail.

The opening is the docstring's text up to its first period followed by a space, a line break or
the end. The rule, and all it checks:

- the opening ends (with that period) within the docstring's first two lines;
- the opening, up to its first colon if it has one, is a clause: it does not start with a question
  word (``How the queue speaks to Redis: ...`` names a topic, it says nothing), and it holds a
  finite verb after its first word (the subject comes first). ``Intake: the stream entries...`` and
  ``Canonical JSON, hashes, and the chain.`` have none.

A verb is a word of ``VERBS``, a closed list: the check cannot parse English, so it knows only the
verbs these openings use, and leaves out forms that are as often nouns here (``runs``, ``writes``,
``reads``, ``checks``...). A noun phrase whose relative clause holds a listed verb passes
(``Decisions a person makes about a run: ...``); a sentence whose only verb is not listed fails:
add the verb, if it is one. ``__main__.py`` has no docstring and is not checked; neither are
class, function and method docstrings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "outlast"

QUESTION_WORDS = frozenset({"how", "what", "where", "who", "why", "which", "whether"})

VERBS = frozenset(
    """
    is are has can must acts applies apply carries comes computes connects covers declares deals
    decides defines enqueues executes exports fetches gives hands holds journals keep keeps lets live
    makes moves puts reaches resolves says sees serves sets share shares shows show signs starts
    stores talks takes tells tracks uses wakes owns gathers sends lists list publishes
    """.split()
)


def opening(doc: str) -> tuple[str, int]:
    """The docstring's first sentence, and the number of the line (from 1) where it ends."""
    m = re.search(r"\.(\s|$)", doc)
    end = m.start() + 1 if m else len(doc)
    return doc[:end], doc[:end].count("\n") + 1


def faults(doc: str) -> list[str]:
    """What in ``doc``'s opening breaks the rule (empty when it keeps it)."""
    sentence, line = opening(doc)
    found = []
    if not sentence.endswith(".") or line > 2:
        found.append("no sentence ends with a period within the first two lines")
    clause = re.sub(r"``[^`]*``", "X", sentence.split(":")[0])
    words = re.findall(r"[A-Za-z][A-Za-z'-]*", clause)
    if words and words[0].lower() in QUESTION_WORDS:
        found.append(f"opens with a question word ({words[0]!r}), naming a topic instead of saying something")
    if not any(w.lower() in VERBS for w in words[1:]):
        found.append(f"no verb before the first colon or period: {' '.join(clause.split())!r}")
    return found


def module_docstrings() -> dict[str, str]:
    docs = {}
    for path in sorted(ROOT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc is not None:
            docs[str(path.relative_to(ROOT))] = doc
    return docs


def test_every_module_docstring_opens_with_a_plain_sentence() -> None:
    docs = module_docstrings()
    assert len(docs) > 100, f"too few module docstrings found under {ROOT}"
    broken = {name: found for name, doc in docs.items() if (found := faults(doc))}
    assert not broken, f"open each module docstring with one sentence (subject, verb, period): {broken}"


@pytest.mark.parametrize(
    "doc",
    [
        "Intake: the stream entries a worker takes. New entries are read from the priority levels.",
        "How the queue speaks to Redis: one server or a Redis Cluster, from the URL.",
        "Canonical JSON, hashes, and the journal's SHA-256 chain.",
        "Executes one claimed run: verify the journal, replay, go on live, commit how it ended.",
        "``Run``: the one thing a workflow sees (``from outlast import Run``).",
        "The dashboard charts' rollup is a step of every worker's sweeper, every minute, at the\n"
        "same moments in every worker, on the wall clock, which is the clock every worker has in\n"
        "common. At each step:",
    ],
)
def test_an_opening_without_a_sentence_is_refused(doc: str) -> None:
    assert faults(doc)


@pytest.mark.parametrize(
    "doc",
    [
        "Intake reads the stream entries a worker takes. New entries are read from the priority levels.",
        "This module connects the queue to Redis: one server or a Redis Cluster, from the URL.",
        "``Run`` is the one thing a workflow sees (``from outlast import Run``).",
        "The worker reads run ids from the stream, claims each run's lease in Postgres,\nexecutes it.",
    ],
)
def test_a_plain_opening_sentence_is_accepted(doc: str) -> None:
    assert faults(doc) == []
