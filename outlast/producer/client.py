"""AsyncClient lets a program enqueue runs, read their status, wait for results, decide, administer.

It is the one implementation, composed (as redis-py composes its client from command mixins) from
the families a caller meets: admitting runs (``admission.py``), reading and acting on them
(``runs.py``), decisions (``decisions.py``), messages into runs (``messages.py``), requests
(``requests.py``), artifacts (``artifacts.py``), forks (``forks.py``), pauses (``pauses.py``),
administration (``admin.py``) and the fleet (``fleet.py``), all over the connections of ``core.py``.
``Client`` (``sync.py``) is the thin synchronous facade over it.
"""

from __future__ import annotations

from outlast.producer.admin import Administration
from outlast.producer.artifacts import Artifacts
from outlast.producer.decisions import Decisions
from outlast.producer.fleet import Fleet
from outlast.producer.forks import Forks
from outlast.producer.messages import Messages
from outlast.producer.pauses import Pauses
from outlast.producer.requests import Requests
from outlast.producer.runs import Runs
from outlast.producer.shown import ClientShown

__all__ = ["AsyncClient"]


class AsyncClient(
    Runs, Artifacts, Forks, ClientShown, Decisions, Messages, Requests, Pauses, Administration, Fleet
):
    """``AsyncClient`` talks to Postgres (the truth) and Redis (the hand-out) on behalf of an
    application."""
