"""This module holds the client's messages into runs. ``send`` stores one, then wakes the run if it
waits on the channel; ``messages`` reads the run's messages."""

from __future__ import annotations

import uuid
from typing import Any

from outlast import _failpoints as failpoints
from outlast._channels import check_schema, to_json
from outlast._journal import Limit
from outlast._model import Receipt, incarnation
from outlast._payloads import PAYLOAD, by_reference, held_by_reference
from outlast.errors import InvalidInput, MessageRefused
from outlast.producer.checks import check_json, check_text
from outlast.producer.core import ClientCore

MAX_ID = 200  # characters of a message id or a channel name


class Messages(ClientCore):
    """The family of messages into runs."""

    async def send(
        self,
        run_id: str,
        channel: str,
        payload: Any,
        message_id: str | None = None,
        *,
        via: str = "client",
        born: int | None = None,
    ) -> Receipt:
        """Send ``payload`` on ``channel`` of the run: stored (kept until the run takes it, in the
        order sent), then the run woken if it waits on that channel. The same ``message_id`` again
        is one message: its first receipt comes back, ``duplicate`` true. A workflow that declares
        channels is sent only on those, with a payload that fits the JSON schema its workers
        published (and its type, when this client knows the app). Refused with nothing stored
        (``MessageRefused``, ``InvalidInput``): an unknown or final run, an unknown channel, a
        payload invalid or over ``OUTLAST_MAX_PAYLOAD``, a channel with ``OUTLAST_MAX_INBOX`` messages
        untaken, a run with ``OUTLAST_MAX_INBOX_RUN``; a ``message_id`` already sent on another
        channel of the run (``conflict``). A callback gives ``born``, the incarnation its token
        binds: another run of the same id is refused as unknown."""
        where = f"run '{run_id}', channel '{channel}'"
        check_text(channel, "a channel", where)
        if len(channel) > MAX_ID:
            raise InvalidInput(f"{where}: a channel name is at most {MAX_ID} characters")
        if message_id is None:
            message_id = uuid.uuid4().hex
        check_text(message_id, "a message id", where)
        if len(message_id) > MAX_ID:
            raise InvalidInput(f"{where}: a message id is at most {MAX_ID} characters")
        check_text(run_id, "a run id", "")
        await self.open()
        run = await self.store.messages.send_to(run_id, channel)  # instead of the status read: no read more
        if run is None or (born is not None and incarnation(run["created_at"]) != born):
            raise MessageRefused(f"{where}: no such run; nothing stored", "unknown")
        wf = self.app.workflows.get(run["workflow"]) if self.app is not None else None
        payload = to_json(wf.channels if wf is not None else None, where, channel, payload)
        limit = Limit(self.settings.max_referenced, "OUTLAST_MAX_REFERENCED")
        text = check_json(payload, "the payload", where, limit)
        check_schema(run["schema"], where, payload)  # as the run's workers published it (0028)
        if by_reference(payload, text, self.settings.max_payload):
            payload = await self._by_reference(run_id, text)
        row = await self.store.messages.send_message(
            run_id,
            channel,
            payload,
            message_id,
            max_bytes=None,  # checked here, in canonical JSON (outlast_send checks Postgres's text)
            max_waiting=self.settings.max_inbox,
            max_waiting_run=self.settings.max_inbox_run,
            via=via,
        )
        if row["refusal"] == "unknown_channel":  # a bad request, as an invalid payload is
            raise InvalidInput(row["refused"])
        if row["refused"] is not None:
            raise MessageRefused(row["refused"], row["refusal"])
        if row["duplicate"]:
            sent_on = await self.store.messages.message_channel(run_id, message_id)
            if sent_on not in (None, channel):
                raise MessageRefused(
                    f"{where}: the message id {message_id!r} was already sent on channel {sent_on!r}; "
                    "an id names one message of the run: nothing stored",
                    "conflict",
                )
        if row["queue"] is not None:  # it waited on this channel: due now
            failpoints.hit("after_send")  # a crash test's point (the sweeper publishes it then)
            await self.queue.publish(row["queue"], run_id, priority=run["priority"])
        # Accepted, but no receive waits on it now, and nothing says one ever will: said in the receipt.
        unheard = bool(run["unheard"]) and row["queue"] is None and not row["duplicate"]
        return Receipt(
            run_id, channel, row["message_id"], row["seq"], row["sent_at"], row["duplicate"], unheard
        )

    async def _by_reference(self, run_id: str, text: str) -> dict[str, Any]:
        """A payload past ``OUTLAST_MAX_PAYLOAD`` (or one that would read as a reference) stored in
        the payload store: what the message's row holds instead. Stored before the row: a send
        refused after leaves an orphan, which the sweeper deletes after its grace."""
        held, sha, body = held_by_reference(PAYLOAD, text)
        await self.store.messages.put_payloads(run_id, {sha: body})
        return held

    async def messages(self, run_id: str) -> list[dict[str, Any]]:
        """The run's messages in the order they were accepted: each one's channel, id, payload, who
        sent it (``via``) and, once taken, the operation that took it (``taken_op``)."""
        await self._status(run_id, whole=False)  # an unknown run is refused
        return await self.store.messages.messages(run_id)
