"""Secret tool arguments are stored only as a keyed hash; every secret value a run knows is kept out of
what it stores, logs and traces.

A tool registered with ``secret=["api_key"]`` has that argument replaced, in everything stored
(journal, events, status, export, logs), by ``{"secret": "hmac-sha256:<hex>"}``: HMAC-SHA256 keyed
with ``OUTLAST_SECRET_KEY`` over the value's canonical JSON. The value lives only in the workflow's
memory: a replay recomputes the call and compares the hashes, and a pending intention re-dispatched
after a crash takes the value from the replayed call. Nothing ever reads a secret back.

A run's ``Secrets`` also remembers the clear values it sealed (the *known* secrets of the run):
they are replaced by ``[secret]`` (``scrub``) wherever they would otherwise land, in a tool's
result and error, the workflow's result, error and reason, a wait's message, an approval's
arguments and a decision's revised ones, before any of it is journaled, stored, logged or put in a
span; a value shorter than ``SHORTEST`` characters is sealed but not searched for in text (it would
mask ordinary words). A value is searched for in each form it may be written in (``forms``: its
``repr``, JSON text, percent-encoding...), since a message that quotes a PEM key with ``!r``
holds ``\\n`` where the key holds a newline; the forms of a value are worked out once, when it is
sealed. An approver cannot type a new value for a sealed argument (``check_revision``): nothing
could keep it but the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, quote_plus

from outlast._journal import args_hash, canonical
from outlast.errors import ConfigError, DecisionRefused

# ``redact(message, secrets)``: a tool exception's message as it may be stored, given the secret
# arguments of the call (name -> value). The call's secret values are replaced afterwards anyway.
Redactor = Callable[[str, Mapping[str, Any]], str]
MASK = "[secret]"
SCHEME = "hmac-sha256:"
SHORTEST = 4  # characters of a known secret value below which text is not searched for it
# Off only in the control of tests/integration/test_secrets_canary.py, which must then find its
# canary everywhere sealing keeps it out of: never a setting.
SEALING = True
T = TypeVar("T")
# How a text is written between the quotes of its repr, its ascii and its JSON (with and without
# ensure_ascii): a text with none of their special characters is written as is by each.
QUOTED: tuple[Callable[[str], str], ...] = (
    lambda t: repr(t)[1:-1],
    lambda t: ascii(t)[1:-1],
    lambda t: json.dumps(t)[1:-1],
    lambda t: json.dumps(t, ensure_ascii=False)[1:-1],
)


class _Tool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def secret(self) -> tuple[str, ...]: ...


class SecretsApp(Protocol):
    """``SecretsApp`` is what this module reads of an ``outlast.App``: its tools and its redaction hook.
    It is said here so that ``outlast.app``, which imports ``Redactor``, is not imported back."""

    @property
    def tools(self) -> Mapping[str, _Tool]: ...
    @property
    def redact_hook(self) -> Redactor | None: ...


def require_key(app: SecretsApp, key: str | None) -> None:
    """``ConfigError`` (one line) when ``app`` declares secret arguments and no key is set."""
    if key is not None:
        return
    declared = [f"{t.name}({', '.join(t.secret)})" for t in app.tools.values() if t.secret]
    if declared:
        raise ConfigError(
            f"OUTLAST_SECRET_KEY is not set, and the app declares secret arguments: {', '.join(declared)}; "
            "set it to a random value of 32 or more characters, the same for every worker"
        )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical(value)


def forms(value: Any) -> frozenset[str]:
    """Every text ``value`` may be written as in a message or a stored string: as given (a string;
    anything else as its canonical JSON, its ``json.dumps`` and its ``repr``), without the blanks
    around it (a line read from a file; unless that leaves fewer than ``SHORTEST`` characters),
    percent-encoded (in a URL), and each of those as ``repr``, ``ascii`` and ``json.dumps`` (with
    and without ``ensure_ascii``) write it between their quotes, once or twice over (JSON text
    quoted by an exception's message). A plain token has one form: itself."""
    texts = {_text(value)}
    if isinstance(value, str):
        if len(value.strip()) >= SHORTEST:
            texts.add(value.strip())
    else:
        texts.add(repr(value))
        with contextlib.suppress(TypeError, ValueError):  # one json cannot write: canonical() could
            texts |= {json.dumps(value), json.dumps(value, ensure_ascii=False)}
    urls = {quote(t, safe="") for t in texts} | {quote_plus(t, safe="") for t in texts if " " in t}
    for _ in range(2):
        texts |= {escaped(t) for t in texts for escaped in QUOTED}
    return frozenset(texts | urls) - {""}  # a percent-encoded text has nothing left to escape


def _longest_first(texts: Iterable[str]) -> tuple[str, ...]:
    """``texts`` in the order they are to be masked in: a longer one first, so that a value
    holding another is masked whole."""
    return tuple(sorted(texts, key=len, reverse=True))


def _sealed(value: Any) -> bool:
    return isinstance(value, dict) and str(value.get("secret", "")).startswith(SCHEME)


def shown_sealed(asked: Mapping[str, Any], revised: Mapping[str, Any]) -> frozenset[str]:
    """The arguments a revision gives a seal where the request shows one: not the call's values
    to type-check (one left as shown is given its value back by the worker, which checks the call
    then; ``check_revision`` refuses any other)."""
    return frozenset(k for k, v in asked.items() if _sealed(v) and _sealed(revised.get(k)))


def check_revision(asked: Mapping[str, Any], revised: Mapping[str, Any], where: str) -> None:
    """``DecisionRefused`` when a revision gives a sealed argument of the request another value
    than its seal (a value typed in clear would be stored in clear)."""
    typed = [k for k, v in asked.items() if _sealed(v) and k in revised and revised[k] != v]
    if typed and SEALING:
        names = ", ".join(repr(k) for k in typed)
        raise DecisionRefused(
            f"{where}: the revision gives the secret argument {names} a new value, which would be "
            "stored in clear; keep it as shown (sealed) and revise the others, or reject and let the "
            "workflow ask again"
        )


class Secrets:
    """``Secrets`` makes the keyed hash of one app's secret arguments, and the redaction of its tools'
    errors. There is one per run attempt, which remembers the clear values it sealed and scrubs them out."""

    def __init__(self, app: SecretsApp, key: str | None) -> None:
        require_key(app, key)
        self._app = app
        self._key = (key or "").encode()
        self._known: set[str] = set()  # the clear values sealed, as text
        self._masks: tuple[str, ...] = ()  # every form of every known value, longest first

    def names(self, tool: str) -> tuple[str, ...]:
        """The secret arguments of ``tool`` (none for an unknown name, e.g. an approval's action)."""
        found = self._app.tools.get(tool)
        return found.secret if found is not None else ()

    def seal(self, tool: str, args: Mapping[str, Any], *, mask: bool = True) -> dict[str, Any]:
        """``args`` (the call's own values) as stored: each secret argument given replaced by its
        keyed hash; its value is remembered, to be scrubbed out of everything the run stores. Every
        known value in the other arguments is masked (``scrub``; not with ``mask`` False, as an
        earlier version journaled them)."""
        if not SEALING:
            return dict(args)
        names = self.names(tool)
        if not names:  # most tools: a copy, with no test per argument (3 per operation)
            return self.scrub(dict(args)) if mask else dict(args)
        for k in names:
            if k in args:
                self._learn(args[k])
        return {k: self._hash(v) if k in names else self.scrub(v) if mask else v for k, v in args.items()}

    def same_call(self, journaled: Mapping[str, Any], tool: str, args: Mapping[str, Any], ahash: str) -> bool:
        """Whether the call of ``tool`` with ``args`` (hashed ``ahash`` as sealed) is the one
        ``journaled`` (an intention's fields): the same tool and arguments hash, or the hash of the
        arguments with known values left in clear, as a version before the masking of non-secret
        arguments journaled them (such a journal replays as it did)."""
        if journaled["tool"] != tool:
            return False
        if journaled["args_hash"] == ahash:
            return True
        return bool(self._known) and args_hash(self.seal(tool, args, mask=False)) == journaled["args_hash"]

    def known(self, value: str) -> None:
        """Remember ``value`` as a known secret of the run without sealing anything (a callback's
        token, which the run hands out as part of a URL): scrubbed out of everything it stores,
        logs and shows from then on."""
        if SEALING:
            self._learn(value)

    def scrub(self, value: T) -> T:
        """``value`` (text, or JSON: keys and strings at any depth) with every known secret value
        replaced by ``[secret]``."""
        if not self._known:
            return value
        if isinstance(value, str):
            for form in self._masks:
                value = value.replace(form, MASK)  # type: ignore[assignment]
            return value
        if isinstance(value, dict):
            return {self.scrub(k): self.scrub(v) for k, v in value.items()}  # type: ignore[return-value]
        if isinstance(value, list | tuple):
            return type(value)(self.scrub(v) for v in value)
        return value

    def _learn(self, value: Any) -> None:
        """Remember ``value`` as known, and its forms as what ``scrub`` masks (worked out once
        per value, not per scrub: a run seals the same key at each call)."""
        text = _text(value)
        if len(text) < SHORTEST or text in self._known:
            return
        self._known.add(text)
        found = (f for f in forms(value) if len(f) >= SHORTEST)
        self._masks = _longest_first({*self._masks, *found})

    def _hash(self, value: Any) -> dict[str, str]:
        mac = hmac.new(self._key, canonical(value).encode(), hashlib.sha256).hexdigest()
        return {"secret": SCHEME + mac}

    def changed(self, tool: str, journaled: Mapping[str, Any], sealed: Mapping[str, Any]) -> str:
        """Words naming the secret arguments whose value differs from the journaled call's
        (never the values), to add to a refusal; empty if none does."""
        names = [k for k in self.names(tool) if journaled.get(k) != sealed.get(k)]
        if not names:
            return ""
        return f" (secret argument {', '.join(repr(n) for n in names)} has another value than journaled)"

    def unseal(self, tool: str, stored: Mapping[str, Any], real: Mapping[str, Any]) -> dict[str, Any]:
        """``stored`` (arguments as shown: sealed and scrubbed, e.g. an approver's revision) with
        each value left as shown given back the call's ``real`` value, in memory only."""
        shown = self.scrub(self.seal(tool, real))
        return {k: real[k] if k in real and v == shown[k] else v for k, v in stored.items()}

    def redact(self, tool: str, args: Mapping[str, Any], message: str) -> str:
        """A tool exception's message as it may be stored or logged: through the app's redaction
        hook, then with every secret value of the call, and every one the run knows, replaced by
        ``[secret]``."""
        if not SEALING:
            return message
        secrets = {k: args[k] for k in self.names(tool) if k in args}
        hook = self._app.redact_hook
        if hook is not None:
            try:
                message = hook(message, secrets)
            except Exception as exc:  # never store what the hook was meant to clean
                return f"(message withheld: the redaction hook raised {type(exc).__name__})"
        message = self.scrub(message)  # the known values (the call's, once sealed), each masked whole
        # Then every form of the call's values not known (too short to be): worked out here, on
        # an error or a capture only.
        unknown = {f for v in secrets.values() if _text(v) not in self._known for f in forms(v)}
        for form in _longest_first(unknown):
            message = message.replace(form, MASK)
        return message
