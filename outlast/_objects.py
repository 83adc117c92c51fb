"""This module stores payloads in an S3-compatible object store.

``OUTLAST_PAYLOAD_STORE=s3://bucket/prefix?...`` names it: AWS S3, GCS's S3 API, R2, MinIO,
SeaweedFS.

Spoken through obstore: the Python binding of the Rust ``object_store`` crate (Apache Arrow's), a
maintained, typed, async client with no event-loop thread of its own, whose wheels carry
everything. The URL's query sets the S3 configuration (``endpoint``, ``region``, and any other
key obstore's ``S3Config`` takes); credentials come from the environment as for any AWS client
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``). An object store that does not answer is an
outage, as Postgres's: ``ServiceUnavailable`` (the run is left for a later claim, never failed),
logged once an episode.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import structlog

from outlast._urls import redact
from outlast.errors import InvalidInput, ServiceUnavailable

log = structlog.get_logger("outlast.payloads")

# A store that does not answer is given up on within seconds: the run is left and tried again by a
# later claim, rather than its lease held through a long retry.
_RETRY = {"max_retries": 2, "retry_timeout": timedelta(seconds=5)}
_CLIENT = {"connect_timeout": "3s", "timeout": "120s"}


class S3Objects:
    """Objects of one bucket, under one prefix; each call an outage or an answer."""

    def __init__(self, url: str) -> None:
        from obstore.store import S3Store  # imported only where an object store is configured

        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise InvalidInput(
                f"OUTLAST_PAYLOAD_STORE {redact(url)!r}: expected s3://BUCKET[/PREFIX][?endpoint=URL]"
            )
        config: dict[str, Any] = dict(parse_qsl(parts.query))
        client = dict(_CLIENT)
        if config.get("endpoint", "").startswith("http://"):
            client["allow_http"] = "true"
        self.url = f"s3://{parts.netloc}{parts.path}"  # never the query: it may hold a key
        self._store = S3Store(
            parts.netloc,
            prefix=parts.path.strip("/") or None,
            config=config,  # type: ignore[arg-type]
            client_options=client,  # type: ignore[arg-type]
            retry_config=_RETRY,  # type: ignore[arg-type]
        )
        self._down = False

    async def put(self, key: str, data: bytes) -> None:
        import obstore

        try:
            await obstore.put_async(self._store, key, data)
        except Exception as exc:
            raise self._outage(exc) from exc
        self._up()

    async def get(self, key: str) -> bytes | None:
        import obstore

        try:
            got = await obstore.get_async(self._store, key)
            data = bytes(await got.bytes_async())
        except FileNotFoundError:  # obstore's NotFoundError is one
            self._up()
            return None
        except Exception as exc:
            raise self._outage(exc) from exc
        self._up()
        return data

    async def delete(self, keys: list[str]) -> None:
        import obstore

        try:
            await obstore.delete_async(self._store, keys)
        except Exception as exc:
            raise self._outage(exc) from exc
        self._up()

    async def sign(self, key: str, seconds: int) -> str:
        """A presigned URL that GETs ``key`` for ``seconds`` (signed here: no request is made)."""
        import obstore

        try:
            url: str = await obstore.sign_async(self._store, "GET", key, timedelta(seconds=seconds))
        except Exception as exc:
            raise self._outage(exc) from exc
        return url

    def _outage(self, exc: Exception) -> ServiceUnavailable:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if not self._down:
            self._down = True
            log.warning("payloads.unavailable", url=self.url, error=first)
        return ServiceUnavailable(f"cannot reach the payload store at {self.url}: {first}")

    def _up(self) -> None:
        if self._down:
            self._down = False
            log.info("payloads.available", url=self.url)


def object_store(url: str) -> S3Objects:
    """The object store ``OUTLAST_PAYLOAD_STORE`` names."""
    return S3Objects(url)
