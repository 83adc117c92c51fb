"""Who decides: principals, the users file and the trusted header.

A decision (an approval, a resolution) is recorded with the *principal* who made it, how they were
authenticated and from where — never with a name someone typed. Through the dashboard and the API
the principal comes from a bearer token listed in the users file (``OUTLAST_USERS``), a session
made by logging in with that token, or a header set by a trusted reverse proxy
(``OUTLAST_AUTH_HEADER``, honoured only from ``OUTLAST_TRUSTED_PROXIES``). The CLI's principal is
the operating-system user on its host.

The users file (TOML, or YAML with PyYAML installed) keeps a token only as its SHA-256 hash::

    [users.alice]
    groups = ["ops"]
    token = "sha256:9f86d0..."

Tokens are 256 random bits, so a plain hash is enough to keep the file from being a key ring.
"""

from __future__ import annotations

import getpass
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import socket
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outlast.errors import ConfigError

_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
_HASH = re.compile(r"sha256:[0-9a-f]{64}")


def check_principal_name(name: str, what: str = "a user name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"{what} must be 1-64 letters, digits or _ . @ -, got {name!r}")
    return name


@dataclass(frozen=True)
class Principal:
    """Someone authenticated: ``how`` is ``token``, ``session``, ``header`` or ``cli``; ``where``
    the client's address (or the CLI's host)."""

    name: str
    groups: frozenset[str] = field(default_factory=frozenset)
    how: str = "token"
    where: str = ""

    def may(self, approvers: Iterable[str]) -> bool:
        """Whether ``approvers`` (user and group names) include this principal."""
        allowed = set(approvers)
        return self.name in allowed or not self.groups.isdisjoint(allowed)

    def record(self) -> dict[str, Any]:
        """What a decision journals about who made it."""
        return {"principal": self.name, "groups": sorted(self.groups), "how": self.how, "where": self.where}


# How a principal is known when its name was only declared, never proven: the CLI, and a program
# calling the client itself. Such a decider is checked by the name it gives (``--as``).
ASSERTED = frozenset({"cli", "client"})


def cli_principal(how: str = "cli") -> Principal:
    """The operating-system user on this host: what the CLI records beside any ``--as``
    (``how="client"``: a program deciding through the client without a principal)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid-{os.getuid()}"
    return Principal(user, how=how, where=socket.gethostname())


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class User:
    name: str
    groups: frozenset[str]
    token_hash: str | None  # None: only through the trusted header


class Users:
    """The users file, read once."""

    def __init__(self, users: Mapping[str, User], path: Path | None = None) -> None:
        self.users = dict(users)
        self.path = path

    @classmethod
    def load(cls, path: Path) -> Users:
        """Read a users file; a bad one raises ConfigError naming the file and what is wrong."""
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read the users file {path}: {exc.strerror}") from None
        data = _parse(path, text)
        table = data.get("users", {})
        if not isinstance(table, dict):
            raise ConfigError(f"users file {path}: 'users' must be a table of user names")
        users = {}
        for name, entry in table.items():
            check_principal_name(name, f"users file {path}: a user name")
            if not isinstance(entry, dict):
                raise ConfigError(f"users file {path}: user {name!r} must be a table")
            groups = entry.get("groups", [])
            if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
                raise ConfigError(f"users file {path}: user {name!r}: groups must be a list of names")
            for g in groups:
                check_principal_name(g, f"users file {path}: user {name!r}: a group name")
            token = entry.get("token")
            if token is not None and not (isinstance(token, str) and _HASH.fullmatch(token)):
                raise ConfigError(
                    f"users file {path}: user {name!r}: token must be 'sha256:<64 hex digits>' "
                    "(a hash, never the token: make one with outlast users add)"
                )
            users[name] = User(name, frozenset(groups), token)
        return cls(users, path)

    def by_token(self, token: str, how: str = "token", where: str = "") -> Principal | None:
        """The principal whose token this is, or None. Every user is compared (constant time)."""
        wanted = hash_token(token)
        found = None
        for user in self.users.values():
            if user.token_hash is not None and hmac.compare_digest(user.token_hash, wanted):
                found = user
        return None if found is None else Principal(found.name, found.groups, how, where)

    def named(self, name: str, how: str, where: str) -> Principal:
        """A principal vouched for by a trusted proxy: groups from the file when listed there."""
        user = self.users.get(name)
        return Principal(name, user.groups if user else frozenset(), how, where)


def _parse(path: Path, text: str) -> dict[str, Any]:
    if path.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError(f"users file {path} is YAML: pip install pyyaml, or use TOML") from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"users file {path} is not valid YAML: {exc}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"users file {path} is not valid TOML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"users file {path}: expected a 'users' table")
    return data


def add_user(path: Path, name: str, groups: Iterable[str]) -> str:
    """Add (or give a new token to) a user in a TOML users file, rewritten whole (a new file,
    0600, put in its place); returns the token, which is stored only as its hash: show it once."""
    if path.suffix in (".yaml", ".yml"):
        raise ConfigError(
            f"users add writes TOML only: {path} is YAML; use a .toml file, or edit the YAML by hand"
        )
    check_principal_name(name)
    groups = sorted({check_principal_name(g, "a group name") for g in groups})
    users = Users.load(path).users if path.exists() else {}
    token = new_token()
    users[name] = User(name, frozenset(groups), hash_token(token))
    lines = []
    for user in users.values():
        lines.append(f"[users.{json.dumps(user.name)}]")
        lines.append(f"groups = {json.dumps(sorted(user.groups))}")
        if user.token_hash is not None:
            lines.append(f"token = {json.dumps(user.token_hash)}")
        lines.append("")
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # made 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines))
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
    return token


def trusted(peer: str, proxies: Iterable[str]) -> bool:
    """Whether ``peer`` (an IP address) is one of ``proxies`` (addresses or networks)."""
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(p, strict=False) for p in proxies)
