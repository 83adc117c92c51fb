"""This module signs and checks callback tokens. A callback is an unguessable URL an outside
service may POST to with no account, its body becoming a message on one channel of one run.

A token binds the run, its incarnation (the run row's creation time, in microseconds: a run pruned
and made again under the same id is another incarnation), the channel and an expiry,
HMAC-SHA256-signed with a key derived from ``OUTLAST_SECRET_KEY`` (a key of its own, so a token is
never a valid hash of anything else): ``<base64url of [run, channel, expiry, incarnation]>.<base64url
of the signature>``. A token signed before incarnations (three claims) is still good for its run id
until it expires. Only the canonical text of a token verifies (unpadded base64url, as ``sign``
writes it, compared in constant time): another spelling of the same bytes is no token, so a
callback has one URL and one key for its deliveries. An altered token fails its signature; an
expired one is refused by its expiry; a token is only ever good for the run and channel it names.
The endpoint is ``outlast.web.callbacks``.

A callback URL is a bearer credential: the worker registers each token it signs as a known secret
of the run (``Secrets.known``), so it is masked wherever the run's values are stored or logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from outlast.errors import ConfigError, InvalidInput, MessageRefused

if TYPE_CHECKING:
    from outlast.producer import AsyncClient

_PURPOSE = b"outlast callback v1"
# How a refusal of a good token is answered: the status, and words about this callback only.
_REFUSED = {
    "unknown": (404, "not a callback"),
    "final": (410, "this callback is closed"),
    "too_large": (413, "the body is too large"),
    "full": (429, "too many messages wait: try again later"),
}
MAX_KEY = 200  # characters of an Idempotency-Key


class BadToken(Exception):
    """A token that is not good: altered, foreign, malformed or expired (never says more)."""


@dataclass(frozen=True, slots=True)
class Bound:
    """What a good token is bound to."""

    run_id: str
    channel: str
    expires_at: datetime
    born: int | None  # the run's incarnation (``_model.incarnation``); None: a token signed before them


def _key(secret_key: str) -> bytes:
    return hmac.new(secret_key.encode(), _PURPOSE, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(
    secret_key: str | None, run_id: str, channel: str, expires_at: datetime, born: int | None = None
) -> str:
    """The token of ``run_id``'s ``channel`` until ``expires_at``, for the incarnation ``born``
    (None: the three-claim form of a token signed before incarnations, which a replay of such a
    run signs again)."""
    if not secret_key:
        raise ConfigError(
            f"run '{run_id}', channel '{channel}': a callback needs OUTLAST_SECRET_KEY (32 or more "
            "random characters, the same for every worker and for the callbacks endpoint)"
        )
    claims: list[Any] = [run_id, channel, int(expires_at.timestamp())]
    if born is not None:
        claims.append(born)
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    return f"{body}.{_mac(secret_key, body)}"


def _mac(secret_key: str, body: str) -> str:
    return _b64(hmac.new(_key(secret_key), body.encode(), hashlib.sha256).digest())


def verify(secret_key: str | None, token: str, now: datetime | None = None) -> Bound:
    """What ``token`` is bound to, or ``BadToken``. The signature is compared as text, in constant
    time, with the one ``sign`` writes: any other spelling of it (padding, other trailing bits,
    characters base64 would skip) is refused, and the body is the exact text signed."""
    if not secret_key or not isinstance(token, str) or len(token) > 2048 or not token.isascii():
        raise BadToken()
    if token.count(".") != 1:
        raise BadToken()
    body, mac = token.split(".")
    if not hmac.compare_digest(_mac(secret_key, body).encode(), mac.encode()):
        raise BadToken()
    try:
        run_id, channel, expiry, *born = json.loads(_unb64(body))
        expires_at = datetime.fromtimestamp(int(expiry), UTC)
    except (ValueError, TypeError) as exc:
        raise BadToken() from exc
    if not (isinstance(run_id, str) and isinstance(channel, str)):
        raise BadToken()
    if len(born) > 1 or (born and type(born[0]) is not int):
        raise BadToken()
    if expires_at <= (now or datetime.now(UTC)):
        raise BadToken()
    return Bound(run_id, channel, expires_at, born[0] if born else None)


def makers(workflows: Mapping[str, Callable[..., Any]]) -> list[str]:
    """The workflows whose code makes callbacks (``run.callback(`` in their source; a workflow
    whose source cannot be read is not counted)."""
    found = []
    for name, fn in workflows.items():
        try:
            if ".callback(" in inspect.getsource(fn):
                found.append(name)
        except (OSError, TypeError):
            continue
    return found


def require_setup(
    workflows: Mapping[str, Callable[..., Any]], secret_key: str | None, base: str | None
) -> list[str]:
    """At a worker's start: ``ConfigError`` (one line) when its workflows make callbacks and
    ``OUTLAST_SECRET_KEY`` is unset, or ``OUTLAST_CALLBACK_URL`` is set but not an absolute
    http(s) URL. Returns the workflows that make callbacks with no ``OUTLAST_CALLBACK_URL`` (their
    URLs are then the dashboard's relative path: the worker warns)."""
    making = makers(workflows)
    if not making:
        return []
    which = ", ".join(making)
    if not secret_key:
        raise ConfigError(
            f"workflows {which} make callbacks and OUTLAST_SECRET_KEY is not set: set it to a random "
            "value of 32 or more characters, the same for every worker and the callbacks endpoint"
        )
    if base is not None:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(
                f"OUTLAST_CALLBACK_URL={base!r} is not an absolute http(s) URL, and workflows {which} "
                "make callbacks: set it to where outlast.web.callbacks is reachable from outside, "
                "e.g. https://example.com/callbacks"
            )
    return making if base is None else []


def url(base: str | None, token: str) -> str:
    """The callback's URL: ``base`` (``OUTLAST_CALLBACK_URL``, where ``outlast.web.callbacks`` is
    mounted), else the path the dashboard serves it at."""
    return f"{(base or '/callbacks').rstrip('/')}/{token}"


async def deliver(
    client: AsyncClient, token: str, body: bytes, content_type: str = "", key: str | None = None
) -> tuple[int, dict[str, Any]]:
    """One delivery to the callback ``token``: (HTTP status, answer). The test kit's
    ``fire_callback`` calls it as the endpoint does."""
    s = client.settings
    try:
        bound = verify(s.secret_key, token)
    except BadToken:
        return 404, {"error": "not a callback"}
    if len(body) > s.max_referenced:  # past OUTLAST_MAX_PAYLOAD, held by reference (client.send)
        return 413, {"error": "the body is too large"}
    if key is not None and not (0 < len(key) <= MAX_KEY and key.isprintable()):
        return 400, {"error": "a bad Idempotency-Key"}
    try:
        payload = _payload(content_type, body)
        receipt = await client.send(
            bound.run_id,
            bound.channel,
            payload,
            message_id(bound.channel, token, body, key),
            via="callback",
            born=bound.born,
        )
    except MessageRefused as exc:
        status, said = _REFUSED.get(exc.refusal, (400, "refused"))
        return status, {"error": said}
    except InvalidInput as exc:  # it names the run and the channel, which the token shows anyway
        return 422, {"error": f"the body is not a valid message for this callback: {exc}"}
    except RecursionError:  # JSON nested deeper than it can be read
        return 400, {"error": "the body is nested too deep: a JSON value of a few levels"}
    return 202, {"accepted": True, "duplicate": receipt.duplicate}


def message_id(channel: str, token: str, body: bytes, key: str | None) -> str:
    """The stored id of a delivery: a hash of its channel, its token and its ``Idempotency-Key``
    (without one, its body). A key is scoped to its callback: the same key on another channel's
    callback is another message, and no sender, who does not hold the token, can take it first."""
    said = b"key\0" + key.encode() if key is not None else b"body\0" + body
    scope = json.dumps([channel, token]).encode()
    return "callback:" + hashlib.sha256(scope + b"\0" + said).hexdigest()


def _payload(content_type: str, body: bytes) -> Any:
    """JSON sent as JSON; any other body as its text."""
    text = body.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return json.loads(text)
        except ValueError:
            raise InvalidInput("not JSON") from None
    return text
