"""outlast: long, tool-using runs that outlast the worker that started them."""

from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App, Retry
from outlast.errors import (
    ApprovalExpired,
    ApprovalRejected,
    BudgetExhausted,
    Cancelled,
    DeadlineExceeded,
    DecisionRefused,
    Fenced,
    InDoubt,
    InvalidInput,
    JournalAltered,
    OutlastError,
    PolicyRefused,
    ProgramChanged,
    ResumeImpossible,
    ResumeRefused,
    RunConflict,
    ToolError,
    ToolTimeout,
    UnknownRun,
    UnknownWorkflow,
)
from outlast.fence import fence
from outlast.model import Decision, RunState
from outlast.model import Run as RunRecord
from outlast.producer import AsyncClient, Client
from outlast.settings import Settings
from outlast.worker.run import Run

__all__ = [
    "NOT_EXECUTED",
    "Action",
    "App",
    "ApprovalExpired",
    "ApprovalRejected",
    "AsyncClient",
    "BudgetExhausted",
    "Cancelled",
    "Client",
    "DeadlineExceeded",
    "Decision",
    "DecisionRefused",
    "Fenced",
    "InDoubt",
    "InvalidInput",
    "JournalAltered",
    "OutlastError",
    "PolicyRefused",
    "ProgramChanged",
    "ResumeImpossible",
    "ResumeRefused",
    "Retry",
    "Run",
    "RunConflict",
    "RunRecord",
    "RunState",
    "Settings",
    "ToolError",
    "ToolTimeout",
    "UnknownRun",
    "UnknownWorkflow",
    "current_action",
    "fence",
]
