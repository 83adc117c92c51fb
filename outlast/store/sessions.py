"""The dashboard's sessions, sign-in attempts and CSRF signing key are kept in Postgres (0019): every
dashboard process on one database shares them, and a restart signs nobody out."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from outlast.store.store import Store


class Sessions:
    """``Sessions`` holds what the dashboard keeps in Postgres: sessions (by the SHA-256 of their
    id), sign-in attempts per address, and the key that signs CSRF tokens."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def create(self, id_hash: str, principal: str, token_hash: str, seconds: float) -> datetime:
        """A session of ``seconds``; when it was made (the database's clock)."""
        await self._store._rows("sessions_prune")
        rows = await self._store._rows(
            "session_create", id_hash=id_hash, principal=principal, token_hash=token_hash, seconds=seconds
        )
        made: datetime = rows[0]["created_at"]
        return made

    async def get(self, id_hash: str, seconds: float) -> tuple[str, str, datetime] | None:
        """The live session's user, the token hash it was made with and when it was made, or
        None: past its expiry, or made more than ``seconds`` ago (whatever its expiry says)."""
        rows = await self._store._rows("session_get", id_hash=id_hash, seconds=seconds)
        return (rows[0]["principal"], rows[0]["token_hash"], rows[0]["created_at"]) if rows else None

    async def end(self, id_hash: str) -> None:
        await self._store._rows("session_end", id_hash=id_hash)

    async def keep_only(self, users: Mapping[str, str]) -> list[str]:
        """End every session but those of these users (name: token hash) with this token;
        returns the users whose sessions ended."""
        names, hashes = list(users), list(users.values())
        rows = await self._store._rows("sessions_keep_only", names=names, hashes=hashes)
        return sorted({r["principal"] for r in rows})

    async def attempt(self, address: str, window: float) -> int:
        """Count one sign-in attempt from ``address``; returns the attempts in its window. The
        windows gone by are deleted first: the table never holds more than one window."""
        await self._store._rows("sign_ins_prune", window=window)
        rows = await self._store._rows("sign_in_try", address=address, window=window)
        return int(rows[0]["tries"])

    async def key(self, name: str, new: bytes) -> bytes:
        """The signing key called ``name``: ``new`` if none was made yet, else the first made."""
        for _ in range(3):  # a race with another process's first key can see neither row
            rows = await self._store._rows("dashboard_key", key_name=name, key=new)
            if rows:
                return bytes(rows[0]["key"])
        raise AssertionError(f"no dashboard key {name!r} after three tries")  # pragma: no cover
