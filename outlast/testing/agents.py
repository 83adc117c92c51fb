"""This module holds what tests an agent run on outlast (``outlast.agents``) with no network.

``Script`` is a model that answers from a list and counts the requests it answered, and
``no_model_requests`` makes sure no request reaches a provider (pydantic-ai's ``ALLOW_MODEL_REQUESTS``)::

    script = Script(
        ModelResponse([ToolCallPart("lookup_order", {"order_id": "A1"})]),
        ModelResponse([TextPart("done")]),
    )
    agent = Agent(script.model, name="support", capabilities=[OutlastDurability(app)])

    def test_resume(outlast_harness):
        with no_model_requests():
            h = outlast_harness(app)
            run = h.client.enqueue("support", {"prompt": "refund A1"})
            h.crash_at("after_result", tool="support:model")  # the first response journaled
            h.start_worker()
            h.wait(run.id)
            assert script.steps(run.id) == [1, 2]  # the journaled response was not asked again

``Script`` counts in this process: with the in-process worker of ``outlast_harness``. A worker
process killed for real (``h.kill_at``) has its own; count there in the world (a table) instead.
Needs ``outlast[agents]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pydantic_ai import models
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from outlast.action import current_action

Answer = ModelResponse | Callable[[list[ModelMessage], AgentInfo], ModelResponse]


class Script:
    """A model (``script.model``, a ``FunctionModel``) that gives the Nth response of the agent
    run the Nth answer (its last one from then on): a ``ModelResponse``, or a function of the
    messages and the agent's info. Each request it answers is recorded in ``calls`` as
    (run id, step), the step counted from 1 in the agent run's messages."""

    def __init__(self, *answers: Answer) -> None:
        if not answers:
            raise ValueError("a Script needs at least one answer")
        self.answers = answers
        self.calls: list[tuple[str, int]] = []
        self.model = FunctionModel(self._answer)

    def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages) + 1
        try:
            run_id = current_action().run_id  # a model request of an agent run is an operation
        except RuntimeError:
            run_id = ""  # the agent run outside outlast
        self.calls.append((run_id, step))
        answer = self.answers[min(step, len(self.answers)) - 1]
        return answer if isinstance(answer, ModelResponse) else answer(messages, info)

    def steps(self, run_id: str) -> list[int]:
        """The steps the model answered for the run, in the order it answered them: a step
        twice is a request sent again."""
        return [step for rid, step in self.calls if rid == run_id]


@contextmanager
def no_model_requests() -> Iterator[None]:
    """Within the block, a request to a real provider raises instead of leaving the process
    (``FunctionModel`` and ``TestModel`` still answer)."""
    allowed = models.ALLOW_MODEL_REQUESTS
    models.ALLOW_MODEL_REQUESTS = False
    try:
        yield
    finally:
        models.ALLOW_MODEL_REQUESTS = allowed


__all__ = ["Answer", "Script", "no_model_requests"]
