"""This package makes OpenAI Agents SDK agents durable as outlast workflows (the ``openai-agents``
extra).

- ``DurableAgent`` (``agent.py``): an agent, and the agents it hands off to, run by
  ``Runner.run`` inside a workflow, each model call and each function tool call an operation of
  the run, the tools' effects declared per tool (``ToolEffect``, as for ``outlast.agents``), the
  tools that need approval waiting for outlast approvals (``Approval``); ``run_streamed`` the
  same streamed (``DurableStreaming``).
- ``JournaledModel`` and ``JournaledProvider`` (``model.py``): any SDK model, its calls
  journaled (request captured, response kept, never asked again on a resume).
- ``RunSession`` (``session.py``): the SDK's ``Session`` of a chat agent's conversation, kept in
  the run and rebuilt by replay on a resume.
"""

from outlast._agent_tools import Approval, ToolEffect, mcp_effect
from outlast.integrations.openai_agents.agent import DurableAgent, DurableStreaming
from outlast.integrations.openai_agents.model import JournaledModel, JournaledProvider
from outlast.integrations.openai_agents.session import RunSession

__all__ = [
    "Approval",
    "DurableAgent",
    "DurableStreaming",
    "JournaledModel",
    "JournaledProvider",
    "RunSession",
    "ToolEffect",
    "mcp_effect",
]
