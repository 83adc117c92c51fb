"""Secret tool arguments, stored only as a keyed hash; tool errors redacted before they are stored.

A tool registered with ``secret=["api_key"]`` has that argument replaced, in everything stored
(journal, events, status, export, logs), by ``{"secret": "hmac-sha256:<hex>"}``: HMAC-SHA256 keyed
with ``OUTLAST_SECRET_KEY`` over the value's canonical JSON. The value lives only in the workflow's
memory: a replay recomputes the call and compares the hashes, and a pending intention re-dispatched
after a crash takes the value from the replayed call. Nothing ever reads a secret back.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from outlast.errors import ConfigError
from outlast.journal import canonical

# ``redact(message, secrets)``: a tool exception's message as it may be stored, given the secret
# arguments of the call (name -> value). The call's secret values are replaced afterwards anyway.
Redactor = Callable[[str, Mapping[str, Any]], str]
MASK = "[secret]"
SCHEME = "hmac-sha256:"


class _Tool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def secret(self) -> tuple[str, ...]: ...


class App(Protocol):
    """What this module reads of an ``outlast.App`` (said here so that ``outlast.app``, which
    imports ``Redactor``, is not imported back): its tools and its redaction hook."""

    @property
    def tools(self) -> Mapping[str, _Tool]: ...
    @property
    def redact_hook(self) -> Redactor | None: ...


def require_key(app: App, key: str | None) -> None:
    """``ConfigError`` (one line) when ``app`` declares secret arguments and no key is set."""
    if key is not None:
        return
    declared = [f"{t.name}({', '.join(t.secret)})" for t in app.tools.values() if t.secret]
    if declared:
        raise ConfigError(
            f"OUTLAST_SECRET_KEY is not set, and the app declares secret arguments: {', '.join(declared)}; "
            "set it to a random value of 32 or more characters, the same for every worker"
        )


class Secrets:
    """The keyed hash of one app's secret arguments, and the redaction of its tools' errors."""

    def __init__(self, app: App, key: str | None) -> None:
        require_key(app, key)
        self._app = app
        self._key = (key or "").encode()

    def names(self, tool: str) -> tuple[str, ...]:
        """The secret arguments of ``tool`` (none for an unknown name, e.g. an approval's action)."""
        found = self._app.tools.get(tool)
        return found.secret if found is not None else ()

    def seal(self, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` as stored: each secret argument given replaced by its keyed hash."""
        names = self.names(tool)
        if not names:  # most tools: a copy, without a test per argument (three times an operation)
            return dict(args)
        return {k: self._hash(v) if k in names else v for k, v in args.items()}

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
        """``stored`` (sealed arguments, e.g. an approver's revision) with each secret hash that
        still matches the call's ``real`` value given back that value, in memory only."""
        sealed = self.seal(tool, real)
        return {
            k: real[k] if k in self.names(tool) and k in real and v == sealed[k] else v
            for k, v in stored.items()
        }

    def redact(self, tool: str, args: Mapping[str, Any], message: str) -> str:
        """A tool exception's message as it may be stored or logged: through the app's redaction
        hook, then with every secret value of the call replaced by ``[secret]``."""
        secrets = {k: args[k] for k in self.names(tool) if k in args}
        hook = self._app.redact_hook
        if hook is not None:
            try:
                message = hook(message, secrets)
            except Exception as exc:  # never store what the hook was meant to clean
                return f"(message withheld: the redaction hook raised {type(exc).__name__})"
        for value in secrets.values():
            text = value if isinstance(value, str) else canonical(value)
            if text:
                message = message.replace(text, MASK)
        return message
