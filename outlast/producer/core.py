"""This module holds what every family of the client shares: the settings, the store (Postgres, the
truth), the queue (Redis, the hand-out), opening and closing, and reading one run."""

from __future__ import annotations

from typing import Any, Self

from outlast._model import RunRecord
from outlast.app import App
from outlast.errors import UnknownRun
from outlast.producer.checks import check_text
from outlast.queue import Queue
from outlast.services import resolve
from outlast.settings import Settings
from outlast.store import Store
from outlast.store.sessions import Sessions


class ClientCore:
    """The connections of a client; the families (runs, decisions, administration, fleet) are
    mixins over it, composed into ``AsyncClient``."""

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        app: App | None = None,
        settings: Settings | None = None,
        shared_listening: bool = False,
    ) -> None:
        """``shared_listening``: every reader woken by Postgres (``wait``, ``follow``, the
        dashboard's live pages) listens on one connection, not one each (the dashboard's)."""
        s = (settings or Settings()).with_(database_url=database_url, redis_url=redis_url)
        self.settings, self.note = resolve(s)
        assert self.settings.database_url and self.settings.redis_url
        self.app = app
        self.store = Store.from_settings(self.settings, shared_listening=shared_listening)
        self.queue = Queue(self.settings.redis_url, self.settings.prefix)
        self.sessions = Sessions(self.store)  # the dashboard's sign-ins (0019)
        self._opened = False

    @classmethod
    def from_env(cls, app: App | None = None, **overrides: Any) -> Self:
        return cls(app=app, settings=Settings.from_env(**overrides))

    async def open(self) -> Self:
        if not self._opened:
            await self.store.open()
            self._opened = True
        return self

    async def close(self) -> None:
        await self.store.close()
        await self.queue.close()

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def status(self, run_id: str) -> RunRecord:
        return await self._status(run_id)

    async def _status(self, run_id: str, whole: bool = True) -> RunRecord:
        """The run; ``whole=False``: an input or result held by reference left a reference (a
        look that does not show them: no read of a large value)."""
        check_text(run_id, "a run id", "")
        await self.open()
        run = await self.store.runs.get_run(run_id, whole)
        if run is None:
            raise UnknownRun(run_id)
        return run
