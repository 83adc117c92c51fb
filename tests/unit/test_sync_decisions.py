"""The synchronous Client decides as the AsyncClient does: every public method of the decisions
family (approvals, pending approvals, decisions, resolutions) is there, blocking."""

from __future__ import annotations

import inspect

from outlast import Client
from outlast.producer.decisions import Decisions


def test_the_sync_client_has_every_decision_method() -> None:
    wanted = {
        n for n, f in vars(Decisions).items() if inspect.iscoroutinefunction(f) and not n.startswith("_")
    }
    missing = sorted(n for n in wanted if not callable(getattr(Client, n, None)))
    assert not missing, f"Client lacks {missing}: a program without asyncio cannot call them"
