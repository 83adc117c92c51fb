"""``Messages`` holds the statements of messages into a run. They are a send, the lease holder's
look at its inbox, the take (journaled and marked taken in one fenced statement), a message the run
cannot take set aside, the wait on a channel, and the run's messages read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._journal import Entry
from outlast._payloads import PAYLOAD, column_ref, whole_value
from outlast.errors import PayloadChanged
from outlast.store.journal import entry_columns
from outlast.store.notify import channel as channel_of
from outlast.store.payloads import Payloads


class Messages(Payloads):
    """Send, look, take and wait: each one statement (``sql/messages.sql``). A payload past
    ``OUTLAST_MAX_PAYLOAD`` is a value of the payload store (``Payloads``), its row holding the
    reference; ``messages`` reads such payloads back whole, in one round trip."""

    async def send_to(self, run_id: str, channel: str) -> dict[str, Any] | None:
        """The run's ``workflow``, ``priority`` and ``created_at`` (its incarnation), and the JSON
        ``schema`` its declared channels give ``channel`` (None: not declared), ``unheard`` (no
        channels declared, and the run never took a message on ``channel``); None: no such run."""
        rows = await self._rows("send_to", run_id=run_id, channel=channel)
        return rows[0] if rows else None

    async def send_message(
        self,
        run_id: str,
        channel: str,
        payload: Any,
        message_id: str,
        *,
        max_bytes: int | None,
        max_waiting: int | None,
        max_waiting_run: int | None = None,
        via: str = "client",
    ) -> dict[str, Any]:
        """Store one message (0029's ``outlast_send_message``: at most ``max_waiting`` untaken on
        the channel, ``max_waiting_run`` in the run): its receipt (``message_id``,
        ``seq``, ``sent_at``, ``duplicate``), the queue to publish its run on if it woke it, or
        ``refusal`` (unknown, final, unknown_channel, too_large, full) and ``refused`` (one
        line) with nothing stored."""
        rows = await self._write(
            "send",
            run_id=run_id,
            channel=channel,
            payload=Jsonb(payload),
            message_id=message_id,
            max_bytes=max_bytes,
            max_waiting=max_waiting,
            max_waiting_run=max_waiting_run,
            via=via,
            notify=channel_of(self.schema, run_id),
        )
        return rows[0]

    async def message_channel(self, run_id: str, message_id: str) -> str | None:
        """The channel the run's message ``message_id`` was sent on (None: no such message)."""
        rows = await self._rows("message_channel", run_id=run_id, message_id=message_id)
        return rows[0]["channel"] if rows else None

    async def inbox(self, run_id: str, token: int, channel: str) -> dict[str, Any] | None:
        """The oldest untaken message of the channel (``message_id`` None: none), the run's count
        of accepted messages (``messages_sent``), whether ``token`` still holds it (``held``) and
        whether a cancellation was asked for (``cancel_requested``)."""
        rows = await self._rows("inbox", run_id=run_id, token=token, channel=channel)
        return rows[0] if rows else None

    def submit_take(
        self, run_id: str, token: int, entry: Entry, held: Sequence[Entry], message_id: str, size: int
    ) -> asyncio.Future[list[dict[str, Any]]]:
        """The lease holder's append of ``entry`` (held entries first) that takes ``message_id``
        from the inbox in the same statement; its rows are an append's (``appended``)."""
        return self._submit(
            "take",
            run_id=run_id,
            token=token,
            seq=entry.seq,
            hash=entry.hash,
            op_id=entry.op_id,
            message_id=message_id,
            bytes=size,
            **entry_columns(held, entry),
        )

    async def set_aside(self, run_id: str, token: int, message_id: str, reason: str) -> None:
        """Set aside a message the run cannot take, with why (fenced: as the lease holder only)."""
        await self._write("set_aside", run_id=run_id, token=token, message_id=message_id, reason=reason)

    async def await_message(
        self, run_id: str, token: int, channel: str, seen: int, wake_at: datetime | None
    ) -> bool:
        """Give up the lease to wait on ``channel`` (fenced), only if the run has accepted no
        message since its count was ``seen``. False: look at the inbox again."""
        detail = {"reason": "message", "channel": channel, "message": f"waiting for a message on {channel!r}"}
        if wake_at is not None:
            detail["until"] = wake_at.isoformat()
        rows = await self._write(
            "await_message",
            run_id=run_id,
            token=token,
            channel=channel,
            seen=seen,
            wake_at=wake_at,
            detail=Jsonb(detail),
        )
        return bool(rows)

    async def messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's messages in the order they were accepted, taken, set aside (``set_aside``:
        why) or neither."""
        rows = await self._rows("messages", run_id=run_id)
        held = [(r, ref) for r in rows if (ref := column_ref(r["payload"], PAYLOAD)) is not None]
        if held:  # a payload missing or changed is shown as its reference
            got = await self.payloads(run_id, sorted({ref["sha256"] for _, ref in held}))
            for r, ref in held:
                with contextlib.suppress(PayloadChanged):
                    r["payload"] = whole_value(run_id, PAYLOAD, ref, got.get(ref["sha256"]))
        return rows
