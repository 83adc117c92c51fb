"""This package makes OpenAI Agents SDK agents durable as outlast workflows (the ``openai-agents``
extra).

- ``DurableAgent`` (``agent.py``): an agent, and the agents it hands off to, run by
  ``Runner.run`` inside a workflow, each model call and each function tool call an operation of
  the run, the tools' effects declared per tool (``ToolEffect``).
- ``JournaledModel`` and ``JournaledProvider`` (``model.py``): any SDK model, its calls
  journaled (request captured, response kept, never asked again on a resume).
"""

from outlast.integrations.openai_agents.agent import DurableAgent, ToolEffect
from outlast.integrations.openai_agents.model import JournaledModel, JournaledProvider

__all__ = ["DurableAgent", "JournaledModel", "JournaledProvider", "ToolEffect"]
