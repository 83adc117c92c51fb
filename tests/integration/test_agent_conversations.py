"""A chat agent on outlast: it waits for the user's next message with no worker held
(``run.receive``), admits input that arrived while it worked once, at its next model request
(``run_agent(..., admit=CHANNEL)``, journaled), and streams its text live to ``client.stream``.
No network: ``FunctionModel`` and ``TestModel`` answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from outlast import App, Run
from outlast._model import RunRecord
from outlast.agents import OutlastDurability, read, run_agent
from outlast.testing import Harness, HarnessFactory
from outlast.testing.agents import Script, no_model_requests


@pytest.fixture(autouse=True)
def offline() -> Iterator[None]:
    with no_model_requests():
        yield


def prompts(messages: list[ModelMessage]) -> list[str]:
    """The user's prompts in the messages, in order."""
    return [
        str(part.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, UserPromptPart)
    ]


# -- a chat: a loop of run.receive, then the agent on the history ----------------------------

chat_app = App()


def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    said = prompts(messages)
    return ModelResponse([TextPart(f"{len(said)} said, last: {said[-1]}")])


chat_agent = Agent(FunctionModel(echo), name="chat", capabilities=[OutlastDurability(chat_app)])


@chat_app.workflow("chat")
async def chat(run: Run, turns: int) -> list[str]:
    history: list[ModelMessage] = []
    answers = []
    for _ in range(turns):
        message = await run.receive("user")  # no worker held until the user speaks
        result = await run_agent(run, chat_agent, message["text"], message_history=history, admit="user")
        history = result.all_messages()
        answers.append(str(result.output))
        await run.set_state("answers", answers)  # the chat shown as it goes
    return answers


def test_a_chat_agent_waits_for_each_message_with_no_worker_held(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(chat_app)
    h.start_worker()
    run = h.client.enqueue("chat", {"turns": 2})
    for turn, text in enumerate(("hello", "refund A1")):
        waiting = h.wait(run.id, "waiting")
        assert waiting.reason == "message" and waiting.lease_expires_at is None  # no worker held
        h.send(run.id, "user", {"text": text})
        until = time.monotonic() + 30
        while len(h.state(run.id, "answers") or []) <= turn:  # the turn answered
            assert time.monotonic() < until, h.client.status(run.id)
            time.sleep(0.05)
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    # The second turn's request carried the first turn: the agent's history went on.
    assert done.result == ["1 said, last: hello", "2 said, last: refund A1"]


# -- input admitted at the next model request -------------------------------------------------

admit_app = App()
SENDER: list[tuple[Harness, str]] = []  # the harness whose client the tool sends with, the run
seen: list[list[str]] = []  # the prompts each model request the script answered saw


def work(task: str) -> str:
    """Work on a task; the user writes meanwhile."""
    h, run_id = SENDER[0]
    h.send(run_id, "user", {"text": "also refund B2"})
    return "worked"


def note(text: str) -> str:
    """Note something down."""
    return "noted"


def saw(reply: ModelResponse) -> Any:
    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(prompts(messages))
        return reply

    return answer


admit_script = Script(
    saw(ModelResponse([ToolCallPart("work", {"task": "refund A1"})])),
    saw(ModelResponse([ToolCallPart("note", {"text": "B2 too"})])),
    saw(ModelResponse([TextPart("both refunded")])),
)
admit_agent = Agent(
    admit_script.model,
    name="admitting",
    tools=[work, note],
    capabilities=[OutlastDurability(admit_app, tools={"work": "idempotent", "note": read()})],
)


@admit_app.workflow("admitting")
async def admitting(run: Run, prompt: str) -> list[str]:
    result = await run_agent(run, admit_agent, prompt, admit="user")
    return prompts(result.all_messages())


def admitted(outlast_harness: HarnessFactory) -> tuple[Harness, str]:
    seen.clear()
    h = outlast_harness(admit_app)
    run = h.client.enqueue("admitting", {"prompt": "refund A1"})
    SENDER[:] = [(h, run.id)]
    return h, run.id


def test_input_sent_while_a_tool_runs_is_seen_by_the_next_model_request_once(
    outlast_harness: HarnessFactory,
) -> None:
    h, run_id = admitted(outlast_harness)
    h.start_worker()
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert seen == [["refund A1"], ["refund A1", "also refund B2"], ["refund A1", "also refund B2"]]
    assert done.result == ["refund A1", "also refund B2"]  # in the agent's own history, once
    taken = [e for e in h.journal(run_id) if e["kind"] == "message" and not e.get("timeout")]
    assert [e["payload"] for e in taken] == [{"text": "also refund B2"}]  # journaled, taken once


def test_admitted_input_is_served_from_the_journal_after_a_crash(outlast_harness: HarnessFactory) -> None:
    h, run_id = admitted(outlast_harness)
    h.crash_at("after_result", tool="admitting.note")  # after the request that admitted it
    assert admit_script.steps(run_id) == [1, 2]
    h.start_worker()
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert admit_script.steps(run_id) == [1, 2, 3]  # no request sent again
    # The request after the resume saw the message once: replayed from the journal, not taken again.
    assert seen[-1] == ["refund A1", "also refund B2"]
    assert done.result == ["refund A1", "also refund B2"]


# -- live output ---------------------------------------------------------------------------

live_app = App()
live_agent = Agent(TestModel(), name="live", capabilities=[OutlastDurability(live_app)])


@live_app.workflow("live")
async def live(run: Run, prompt: str) -> str:
    result = await run_agent(run, live_agent, prompt, stream=True)  # no event_stream_handler
    return str(result.output)


def test_the_model_s_text_streams_live_to_client_stream_then_the_result(
    outlast_harness: HarnessFactory,
) -> None:
    h = outlast_harness(live_app)
    h.start_worker()
    run = h.client.enqueue("live", {"prompt": "hi"})
    items = list(h.client.stream(run.id))
    assert isinstance(items[-1], RunRecord) and items[-1].result == "success (no tool calls)"
    chunks = [item.data for item in items[:-1]]
    assert len(chunks) > 1 and "".join(chunks) == "success (no tool calls)"
    assert [e["tool"] for e in h.journal(run.id) if e["kind"] == "intention"] == ["live:model"]
