"""App is the registry of workflows, tools and reconcilers a worker serves."""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import inspect
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pydantic
import tenacity
from pydantic_core import ErrorDetails, PydanticSerializationError

from outlast._channels import schemas
from outlast._journal import not_json, unordered
from outlast._limits import Rate, parse_rates
from outlast._model import Partial
from outlast._schedules import CatchUp, Schedule
from outlast._secrets import Redactor
from outlast.action import Action
from outlast.errors import (
    ConfigError,
    InvalidInput,
    OutlastError,
    ToolTimeout,
    UnknownTool,
    UnknownWorkflow,
)
from outlast.settings import check_name

Effect = Literal["write", "read"]
EFFECTS: tuple[str, ...] = ("write", "read")
ToolKind = Literal["tool", "model"]
F = TypeVar("F", bound=Callable[..., Any])
W = TypeVar("W", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True)
class Retry:
    """``Retry`` retries transient failures inside one crossing, with the same idempotency key."""

    attempts: int = 3
    wait: float = 0.1
    max_wait: float = 2.0
    on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)

    def policy(self, after_timeout: bool = False) -> tenacity.AsyncRetrying:
        """``after_timeout``: a dispatch given up on (``ToolTimeout``) may be tried again — only
        for a read or an idempotent tool, since the first attempt may still be running."""
        # Never a BaseException (a cancellation, a call abandoned, a hand-over), whatever ``on`` says.
        retry: tenacity.retry_base = tenacity.retry_if_exception_type(
            self.on
        ) & tenacity.retry_if_exception_type(Exception)
        if not after_timeout:
            retry = retry & tenacity.retry_if_not_exception_type(ToolTimeout)
        return tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=self.wait, max=self.max_wait),
            retry=retry,
            reraise=True,
        )


@dataclass(frozen=True)
class Tool:
    """A ``Tool`` is a registered tool: what it is, and how far a repeat of it can be trusted."""

    name: str
    fn: Callable[..., Any]
    effect: Effect = "write"
    idempotent: bool = False
    retry: Retry | None = None
    args_model: type[pydantic.BaseModel] = field(default=pydantic.BaseModel)
    cost: dict[str, float] = field(default_factory=dict)  # the estimate reserved before dispatch
    timeout: float | None = None  # seconds one dispatch may take before it is given up on
    secret: tuple[str, ...] = ()  # arguments stored only as a keyed hash (outlast._secrets)
    kind: ToolKind = "tool"  # "model": a call to a model, traced with the GenAI conventions
    model: str | None = None  # the model a "model" tool calls (its spans' gen_ai.request.model)
    max_concurrent: int | None = None  # dispatches at once across every worker
    rates: tuple[Rate, ...] = ()  # shared rate limits, across every worker

    @functools.cached_property
    def is_async(self) -> bool:
        """Whether ``fn`` is a coroutine function (awaited on the loop; else run on a thread)."""
        return inspect.iscoroutinefunction(self.fn)

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check the call against the tool's type hints before anything is written: its arguments
        as JSON, refused (naming the argument and the type) when one has no JSON form, or is a set
        (its order, and so the call's hash, would change on a resume)."""
        try:
            model = self.args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            raise self._invalid(exc.errors()) from None
        given = model.__dict__  # (``dict(model)`` costs 20 us a call)
        found = unordered(given)
        if found:
            raise InvalidInput(
                f"invalid call to tool '{self.name}': {found}, whose order changes from one "
                "process to the next: pass a sorted list"
            )
        try:
            return model.model_dump(mode="json")
        except PydanticSerializationError as exc:
            raise InvalidInput(f"invalid call to tool '{self.name}': {not_json(given) or str(exc)}") from None

    def check(self, args: dict[str, Any], unchecked: Collection[str] = ()) -> None:
        """``InvalidInput`` when ``args`` do not fit the tool's type hints, leaving out the
        arguments named in ``unchecked``: ones whose value is not the call's own yet (a sealed
        argument of a revision, which the worker gives its value back before the call is
        checked)."""
        try:
            self.args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            errors = [e for e in exc.errors() if not e["loc"] or e["loc"][0] not in unchecked]
            if errors:
                raise self._invalid(errors) from None

    def _invalid(self, errors: list[ErrorDetails]) -> InvalidInput:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}" for e in errors)
        return InvalidInput(f"invalid call to tool '{self.name}': {problems}")


Reconciler = Callable[[dict[str, Any], Action], Any]
Compensation = Callable[[dict[str, Any], Any], Any]
Policy = Callable[[str, dict[str, Any], Any], Any]
CompensateOn = Literal["cancel", "failure"]
# Called with the run's input and the error that stopped it (its deadline or budget).
PartialHandler = Callable[[dict[str, Any], OutlastError], "Partial[Any] | None"]
# ``"tenant"`` (the run's tenant), or a function of the run's input, or of its input and tenant.
ConcurrencyKey = Literal["tenant"] | Callable[..., Any]
KeyOf = Callable[[dict[str, Any], str | None], Any]  # (input, tenant) -> the value capped


def _cap(what: str, n: int | None) -> None:
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise TypeError(f"{what}: max_concurrent must be a whole number of at least 1, got {n!r}")


def _by_tenant(run_input: dict[str, Any], tenant: str | None) -> str:
    """``concurrency_key="tenant"``: a key per tenant; the runs without one share a key of their own
    (``no-tenant``, which no tenant's key can be)."""
    return "no-tenant" if tenant is None else f"tenant:{tenant}"


def _takes(signature: inspect.Signature, n: int) -> bool:
    """Whether a function of ``signature`` can be called with ``n`` positional arguments."""
    try:
        signature.bind(*[None] * n)
    except TypeError:
        return False
    return True


def _key_of(workflow: str, key: ConcurrencyKey) -> KeyOf:
    """The concurrency key as one function of (input, tenant), decided here from its signature:
    ``"tenant"``, a function of (input, tenant), or of (input) alone (also one whose signature
    cannot be read, such as ``operator.itemgetter``: the form it always had)."""
    if key == "tenant":
        return _by_tenant
    if not callable(key):
        raise TypeError(f'workflow {workflow!r}: concurrency_key must be "tenant" or a function, got {key!r}')
    fn: Callable[..., Any] = key
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    if signature is not None and _takes(signature, 2):
        return fn
    if signature is None or _takes(signature, 1):
        return lambda run_input, tenant: fn(run_input)
    raise TypeError(
        f"workflow {workflow!r}: concurrency_key must take (input) or (input, tenant), not {signature}"
    )


@dataclass(frozen=True)
class Workflow:
    """A ``Workflow`` is a registered workflow and the identity of its program."""

    name: str
    fn: Callable[..., Awaitable[Any]]
    version: str
    fingerprint: str
    compensate_on: tuple[CompensateOn, ...] = ()
    partial: bool | PartialHandler = False  # accepts partial results (and how, when stopped)
    max_concurrent: int | None = None  # runs executing at once, across every worker (per key)
    concurrency_key: KeyOf | None = None  # the run's (input, tenant) -> the key capped
    channels: dict[str, Any] | None = None  # declared message channels and their types (None: any)
    fails_on: tuple[type[BaseException], ...] = ()  # exceptions that fail the run (others park it)
    queue: str | None = None  # the queue its runs go to when none is given (None: the default)

    @property
    def accepts_partial(self) -> bool:
        return self.partial is not False

    @property
    def program(self) -> str:
        return f"{self.version}:{self.fingerprint[:16]}"


def fingerprint(fn: Callable[..., Any]) -> str:
    """A hash of the function's source (its bytecode where the source is not at hand)."""
    try:
        text = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        text = fn.__code__.co_code
    return hashlib.sha256(text).hexdigest()


def _args_model(name: str, fn: Callable[..., Any]) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = Any if p.annotation is inspect.Parameter.empty else p.annotation
        fields[p.name] = (ann, ... if p.default is inspect.Parameter.empty else p.default)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return pydantic.create_model(f"{name}_args", __config__=config, **fields)


def _like(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``name`` is close to one of ``known``, else nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unique(what: str, name: str, registered: Mapping[str, object]) -> None:
    if name in registered:
        raise TypeError(f"{what} {name!r} is registered twice in this app: give each {what} its own name")


class App:
    """Register workflows, tools and reconcilers; a worker serves one App."""

    def __init__(self, *, redact: Redactor | None = None) -> None:
        """``redact(message, secrets)`` cleans a tool exception's message before it is stored
        (see ``redactor``)."""
        self.redact_hook = redact
        self.workflows: dict[str, Workflow] = {}
        self.tools: dict[str, Tool] = {}
        self.reconcilers: dict[str, Reconciler] = {}
        self.compensations: dict[str, Tool] = {}
        self.policy_hook: Policy | None = None
        self.schedules: dict[str, Schedule] = {}
        self._names: dict[Callable[..., Any], str] = {}  # a tool's function -> its name

    def workflow(
        self,
        name: str | None = None,
        *,
        version: str = "1",
        compensate_on: tuple[CompensateOn, ...] = (),
        partial: bool | PartialHandler = False,
        max_concurrent: int | None = None,
        concurrency_key: ConcurrencyKey | None = None,
        channels: dict[str, Any] | None = None,
        fails_on: tuple[type[BaseException], ...] = (),
        queue: str | None = None,
    ) -> Callable[[W], W]:
        """Register an ``async def`` workflow taking ``run`` and the run's input as keywords.
        ``compensate_on=("cancel", "failure")`` runs the compensations of its completed
        operations, newest first, before the run ends ``cancelled`` / ``failed``.
        ``partial`` says the workflow accepts partial results: with ``True`` it may return
        ``Partial(output, unfinished=[...])`` and the run ends ``partial``; a handler
        ``handler(run_input, error) -> Partial | None`` also turns a stop by its deadline
        (``DeadlineExceeded``) or budget (``BudgetExhausted``) into a ``partial`` end. A workflow
        without it never ends ``partial`` (a ``Partial`` it returns fails the run).
        ``max_concurrent=N`` lets at most N runs of it execute at once across every worker; a run
        over the cap is parked (``waiting``, reason ``concurrency_slot``, tried again within
        seconds) without holding a worker. With ``concurrency_key`` the cap is per key: ``"tenant"``
        caps each tenant's runs (``run.tenant``) at N, and the runs without a tenant share one more
        key of N; a function is called as ``f(input)`` or ``f(input, tenant)``, as its signature
        says (read here, once: another signature raises ``TypeError``). ``channels={"reply": Reply}``
        declares the channels its runs receive messages on, each with the type a message must have
        (a pydantic model or any type pydantic validates): a send on another channel is refused.
        An exception its code raises parks the run (a bug: ``waiting``, reason ``workflow_error``,
        until a fix is deployed and the run resumed), unless the workflow means it: ``raise
        outlast.Failure(...)``, an outlast refusal, or a type in ``fails_on`` ends the run
        ``failed`` (``fails_on=(Exception,)``: every exception fails it, as before parking).
        ``queue="payouts"`` routes its runs to that queue when the enqueue names none (a client
        given this app, its child runs, its schedules), and a worker of this app started with no
        ``--queue`` serves it beside the default queue."""
        if queue is not None:
            try:
                check_name(queue)
            except ValueError as exc:
                raise TypeError(f"workflow {name!r}: the queue {exc}") from None
        if not (isinstance(partial, bool) or callable(partial)):
            raise TypeError(f"workflow {name!r}: partial must be True, False or a handler")
        _cap(f"workflow {name!r}", max_concurrent)
        if concurrency_key is not None and max_concurrent is None:
            raise TypeError(f"workflow {name!r}: concurrency_key needs max_concurrent")

        def register(fn: W) -> W:
            plain: Any = fn  # (iscoroutinefunction would narrow fn's own type)
            if not inspect.iscoroutinefunction(plain):
                raise TypeError(f"workflow {fn.__name__!r} must be an async def")
            wf_name = name or fn.__name__
            _unique("workflow", wf_name, self.workflows)
            wf = Workflow(
                wf_name,
                fn,
                version,
                fingerprint(fn),
                tuple(compensate_on),
                partial,
                max_concurrent,
                None if concurrency_key is None else _key_of(wf_name, concurrency_key),
                None if channels is None else dict(channels),
                tuple(fails_on),
                queue,
            )
            self.workflows[wf.name] = wf
            return fn

        return register

    def schedule(
        self,
        cron: str,
        *,
        name: str | None = None,
        workflow: str | None = None,
        tz: str = "UTC",
        input: dict[str, Any] | None = None,
        catch_up: CatchUp = "latest",
        queue: str | None = None,
    ) -> Callable[[W], W]:
        """Enqueue a workflow at every tick of ``cron`` (five fields, or six with seconds first)
        in the time zone ``tz``, with ``input``. Above ``@app.workflow`` it schedules that
        workflow; with ``workflow=`` it is a plain call. ``name`` (default: the workflow's) names
        the schedule in ``outlast schedules`` and its runs' ids (``NAME@2026-12-01T08:00:00Z``).
        ``catch_up``: of the ticks missed while no worker was up, enqueue the latest, none, or
        all. Refused at once (``ValueError``) when the expression, zone or input is not valid."""

        def add(wf_name: str) -> None:
            sched = Schedule(name or wf_name, cron, wf_name, tz, dict(input or {}), catch_up, queue)
            if sched.name in self.schedules:
                raise ValueError(f"schedule {sched.name!r} is declared twice: give one a name=")
            self.schedules[sched.name] = sched

        if workflow is not None:
            add(workflow)

        def register(fn: W) -> W:
            if workflow is None:
                found = [wf.name for wf in self.workflows.values() if wf.fn is fn]
                if not found:
                    raise TypeError(f"@app.schedule goes above @app.workflow ({fn.__name__!r} is not one)")
                add(found[0])
            return fn

        return register

    def tool(
        self,
        name: str | None = None,
        *,
        effect: Effect = "write",
        idempotent: bool = False,
        retry: Retry | None = None,
        cost: dict[str, float] | None = None,
        timeout: float | None = None,
        secret: list[str] | tuple[str, ...] = (),
        kind: ToolKind = "tool",
        model: str | None = None,
        max_concurrent: int | None = None,
        rate: dict[str, str] | None = None,
    ) -> Callable[[F], F]:
        """Register a tool. ``effect="read"`` is redone freely; ``idempotent=True`` is the host's
        promise that a repeat with the same idempotency key has no second effect. ``cost`` is the
        estimate reserved from the run's budget before each dispatch (the tool may report the
        actual with ``current_action().charge(...)``). ``timeout`` (seconds) gives a dispatch up:
        a read or idempotent tool then fails with ``ToolTimeout``; any other operation is in doubt,
        since its effect may still land. ``secret`` names arguments stored only as a keyed hash
        (HMAC-SHA256 with ``OUTLAST_SECRET_KEY``), never in clear. ``kind="model"`` marks a call
        to a model (``model`` names it): its trace spans carry the GenAI attributes and the tokens
        it charges. ``max_concurrent=N`` caps its dispatches at once across every worker; ``rate``
        (``{"requests": "500/min", "tokens": "90000/min"}``) caps them in any window, shared by
        every worker: a dispatch waits for room. A name other than ``requests`` is reserved from
        ``cost`` and settled with what the tool charges."""
        _cap(f"tool {name!r}", max_concurrent)
        if effect not in EFFECTS:
            one_of = ", ".join(EFFECTS)
            raise TypeError(
                f"tool {name!r}: effect={effect!r} is not one of {one_of}{_like(effect, EFFECTS)}"
            )
        if timeout is not None and not (0 < timeout < float("inf")):
            raise ValueError(f"tool {name!r}: timeout must be a positive number of seconds")

        def register(fn: F) -> F:
            tool_name = name or fn.__name__
            _unique("tool", tool_name, self.tools)
            rates = parse_rates(tool_name, rate or {}, cost or {})
            self._names[fn] = tool_name
            args_model = _args_model(tool_name, fn)
            unknown = [n for n in secret if n not in args_model.model_fields]
            if unknown:
                raise TypeError(f"tool {tool_name!r}: secret names no argument of it: {', '.join(unknown)}")
            self.tools[tool_name] = Tool(
                tool_name,
                fn,
                effect,
                idempotent,
                retry,
                args_model,
                dict(cost or {}),
                timeout,
                tuple(secret),
                kind,
                model,
                max_concurrent,
                rates,
            )
            return fn

        return register

    def compensation(self, tool: str, *, idempotent: bool = False) -> Callable[[Compensation], Compensation]:
        """Register the undo/offset step of ``tool``: called as ``fn(args, result)`` with the
        completed operation's arguments and result, as a journaled operation of its own."""

        def register(fn: Compensation) -> Compensation:
            name = f"compensate:{tool}"
            config = pydantic.ConfigDict(arbitrary_types_allowed=True)
            model = pydantic.create_model(
                f"{tool}_compensation", __config__=config, args=(Any, ...), result=(Any, None)
            )
            self.compensations[tool] = Tool(name, fn, "write", idempotent, None, model)
            return fn

        return register

    def policy(self, fn: Policy) -> Policy:
        """Register the hook called before every dispatch as ``fn(action, args, run)``: return
        True or None to allow; False or a reason (str) to refuse (``PolicyRefused``)."""
        self.policy_hook = fn
        return fn

    def redactor(self, fn: Redactor) -> Redactor:
        """Register the hook a tool exception's message goes through before it is stored or
        logged, as ``fn(message, secrets)`` (``secrets``: the call's secret arguments by name);
        return the message to keep. The call's secret values are replaced by ``[secret]`` after
        it in any case; the exception's type name is kept as is."""
        self.redact_hook = fn
        return fn

    def reconciler(self, tool: str) -> Callable[[Reconciler], Reconciler]:
        """Register how to ask the world whether an interrupted call of ``tool`` happened: return
        its result, or ``NOT_EXECUTED``; raise when unsure (never guess)."""

        def register(fn: Reconciler) -> Reconciler:
            self.reconcilers[tool] = fn
            return fn

        return register

    def get_workflow(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            like = _like(name, self.workflows)
            raise UnknownWorkflow(f"unknown workflow '{name}'{like} (this app has: {known})") from None

    def get_tool(self, name: str) -> Tool:
        try:
            return self.tools[name]
        except KeyError:
            known = ", ".join(sorted(self.tools)) or "none"
            like = _like(name, self.tools)
            raise UnknownTool(f"unknown tool '{name}'{like} (this app has: {known})") from None

    def tool_name(self, fn: Callable[..., Any]) -> str:
        """The name a tool function was registered under (``run.call(fn, ...)``)."""
        try:
            return self._names[fn]
        except (KeyError, TypeError):
            what = getattr(fn, "__name__", repr(fn))
            raise UnknownTool(f"'{what}' is not a tool of this app: register it with @app.tool") from None

    def check(self) -> None:
        """``ConfigError`` (one line) for a reconciler or compensation of a tool this app does not
        have: a typo there would silently leave the tool's interrupted calls in doubt. Called when a
        worker starts (a reconciler may be registered before its tool)."""
        for kind, named in (("reconciler", self.reconcilers), ("compensation", self.compensations)):
            for tool in named:
                if tool not in self.tools:
                    raise ConfigError(
                        f"@app.{kind}({tool!r}) names no tool of this app{_like(tool, self.tools)}; "
                        f"its tools: {', '.join(sorted(self.tools)) or 'none'}"
                    )

    def programs(self) -> dict[str, str]:
        return {name: wf.program for name, wf in self.workflows.items()}

    def queue_of(self, workflow: str) -> str | None:
        """The queue ``workflow`` routes its runs to, if this app knows it and it names one."""
        wf = self.workflows.get(workflow)
        return wf.queue if wf is not None else None

    def queues(self, default: str) -> list[str]:
        """The queues a worker of this app serves when none is named: ``default``, then each queue a
        workflow routes to, in the order they were registered."""
        routed = [wf.queue for wf in self.workflows.values() if wf.queue is not None]
        return list(dict.fromkeys([default, *routed]))

    def routed_schedules(self) -> dict[str, Schedule]:
        """The schedules, each naming the queue of its workflow where it names none."""
        return {
            name: s if s.queue else dataclasses.replace(s, queue=self.queue_of(s.workflow))
            for name, s in self.schedules.items()
        }

    def declared_channels(self) -> list[dict[str, Any]]:
        """Each workflow's program and its channels' JSON schemas, as a worker publishes them."""
        return [
            {"workflow": name, "program": wf.program, "channels": schemas(wf.channels)}
            for name, wf in self.workflows.items()
        ]
