"""What ARCHITECTURE.md's LangGraph section says is absent is absent: the LangGraph integration
imports nothing of outlast but ``outlast.app``, ``outlast.action``, ``outlast.errors`` and
``outlast._mcp`` (and ``outlast.worker.run`` for its types), and its checkpointer nothing of
outlast at all but its own package."""

from __future__ import annotations

from tests.unit.test_architecture import imported

ALLOWED = {"outlast.app", "outlast.action", "outlast.errors", "outlast._mcp", "outlast.worker.run"}
OWN = "outlast.integrations.langgraph"


def test_the_langgraph_integration_reaches_only_what_the_page_says() -> None:
    found = imported("integrations/langgraph")
    assert len(found) >= 4, found
    beyond = {
        module: outside
        for module, names in found.items()
        if (outside := {n for n in names - ALLOWED if not n.startswith(OWN)})
    }
    assert not beyond, beyond
    for module in ("checkpointer.py", "_sql.py"):
        names = found[f"outlast/integrations/langgraph/{module}"]
        assert all(n.startswith(OWN) for n in names), names
