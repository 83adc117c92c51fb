"""The outlast checkpointer passes LangChain's conformance suite for LangGraph checkpointers
(``langgraph-checkpoint-conformance``: its async methods, every capability it finds overridden),
and a compiled graph runs on it through its sync methods, on real Postgres, each test in a schema
of its own."""

from __future__ import annotations

import operator
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import END, START, StateGraph

from outlast.integrations.langgraph import OutlastCheckpointer
from tests.conftest import drop_schemas


@pytest.fixture
def database(services: tuple[str, str]) -> Iterator[tuple[str, str]]:
    """The test database's URL and a schema name of this test's own, dropped after it."""
    schema = f"lg_{uuid.uuid4().hex[:10]}"
    yield services[0], schema
    drop_schemas(services[0], schema)


async def test_the_conformance_suite_passes_every_capability(
    database: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, schema = database

    @checkpointer_test(name="OutlastCheckpointer")
    async def outlast_checkpointer() -> AsyncIterator[OutlastCheckpointer]:
        async with OutlastCheckpointer(url, schema=schema) as saver:
            yield saver

    report = await validate(outlast_checkpointer)
    with capsys.disabled():
        report.print_report()
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert report.passed_all_base(), failures
    assert report.passed_all(), failures
    assert report.conformance_level() == "FULL"
    assert all(r.detected for r in report.results.values()), "every capability is implemented"


class Counted(TypedDict):
    steps: Annotated[list[str], operator.add]


def test_a_graph_checkpoints_through_the_sync_methods(database: tuple[str, str]) -> None:
    """``invoke`` uses the sync methods: the thread's state is kept, and a second invoke on the
    thread starts from it; list, copy and delete behave as the async ones."""
    url, schema = database
    builder = StateGraph(Counted)
    builder.add_node("a", lambda s: {"steps": ["a"]})
    builder.add_node("b", lambda s: {"steps": ["b"]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    with OutlastCheckpointer(url, schema=schema) as saver:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "t1"}}
        assert graph.invoke({"steps": []}, config) == {"steps": ["a", "b"]}
        assert graph.invoke({"steps": ["again"]}, config) == {"steps": ["a", "b", "again", "a", "b"]}
        assert graph.get_state(config).values == {"steps": ["a", "b", "again", "a", "b"]}
        history = list(saver.list(config))
        assert len(history) == 8  # input, a, b: twice, each with its first empty checkpoint
        saver.copy_thread("t1", "t2")
        assert graph.get_state({"configurable": {"thread_id": "t2"}}).values["steps"][-1] == "b"
        saver.prune(["t2"])
        assert len(list(saver.list({"configurable": {"thread_id": "t2"}}))) == 1
        saver.delete_thread("t1")
        assert saver.get_tuple(config) is None
