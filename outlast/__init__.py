"""outlast executes long, tool-using runs that outlast the worker that started them.

This module is the public door. What it exports (defined in ``outlast.app``, ``outlast.action``
and ``outlast.errors``) is the API, with ``outlast.fence``, ``outlast.settings``,
``outlast.identity``, ``outlast.services``, ``outlast.testing``, ``outlast.dashboard``,
``outlast.web``, ``outlast.agents`` (with the ``agents`` extra),
``outlast.integrations.langgraph`` (with the ``langgraph`` extra) and the demos (``outlast.demo``,
``outlast.demo_app``, ``outlast.demo_agent``, ``outlast.demo_agent_app``). Every other module is
internal and may change in any release: the top-level ones say so by a leading underscore
(``outlast._journal``), the packages ``worker``, ``store``, ``queue``, ``producer`` and ``cli`` by
this sentence.
"""

from typing import TYPE_CHECKING, Any

from outlast._model import Answered, Chunk, Decision, Partial, Receipt, RunRecord, RunState, StateValue
from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App, Retry
from outlast.errors import (
    AnswerForbidden,
    AnswerRefused,
    ApprovalExpired,
    ApprovalRejected,
    BudgetExhausted,
    Cancelled,
    ChildFailed,
    ConfigError,
    DeadlineExceeded,
    DecisionForbidden,
    DecisionRefused,
    Failure,
    Fenced,
    InDoubt,
    InvalidInput,
    JournalAltered,
    MessageRefused,
    NotInDoubt,
    OutlastError,
    PartialRefused,
    PolicyRefused,
    ProgramChanged,
    RateLimited,
    RequestExpired,
    ResumeImpossible,
    ResumeRefused,
    RunChanged,
    RunConflict,
    RunFinished,
    RunNotFinished,
    RunNotWaiting,
    SchemaError,
    ServiceUnavailable,
    ToolError,
    ToolTimeout,
    UnknownApproval,
    UnknownRun,
    UnknownTool,
    UnknownWorkflow,
    WaitTimeout,
)
from outlast.fence import fence
from outlast.settings import Settings
from outlast.worker.children import Child
from outlast.worker.run import Run
from outlast.worker.wait import Won

if TYPE_CHECKING:
    from outlast.producer import AsyncClient, Client


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient`` are imported on first use: a worker never needs the
    producer's modules (~1.5 MB of its memory)."""
    if name in ("AsyncClient", "Client"):
        from outlast import producer

        return getattr(producer, name)
    raise AttributeError(f"module 'outlast' has no attribute {name!r}")


__all__ = [
    "NOT_EXECUTED",
    "Action",
    "AnswerForbidden",
    "AnswerRefused",
    "Answered",
    "App",
    "ApprovalExpired",
    "ApprovalRejected",
    "AsyncClient",
    "BudgetExhausted",
    "Cancelled",
    "Child",
    "ChildFailed",
    "Chunk",
    "Client",
    "ConfigError",
    "DeadlineExceeded",
    "Decision",
    "DecisionForbidden",
    "DecisionRefused",
    "Failure",
    "Fenced",
    "InDoubt",
    "InvalidInput",
    "JournalAltered",
    "MessageRefused",
    "NotInDoubt",
    "OutlastError",
    "Partial",
    "PartialRefused",
    "PolicyRefused",
    "ProgramChanged",
    "RateLimited",
    "Receipt",
    "RequestExpired",
    "ResumeImpossible",
    "ResumeRefused",
    "Retry",
    "Run",
    "RunChanged",
    "RunConflict",
    "RunFinished",
    "RunNotFinished",
    "RunNotWaiting",
    "RunRecord",
    "RunState",
    "SchemaError",
    "ServiceUnavailable",
    "Settings",
    "StateValue",
    "ToolError",
    "ToolTimeout",
    "UnknownApproval",
    "UnknownRun",
    "UnknownTool",
    "UnknownWorkflow",
    "WaitTimeout",
    "Won",
    "current_action",
    "fence",
]
