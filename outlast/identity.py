"""This module says who decides: principals, the users file and the trusted header.

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

Roles come from groups. Everyone signed in is a ``viewer`` (sees everything, acts on nothing); an
``operator`` cancels, resumes and requeues dead letters; an ``approver`` decides approvals (among
an action's approvers) and resolves in-doubt operations; a ``sender`` (a token for a program that
talks with runs) only sends messages to runs, which an operator may do too. By default the group
``operators`` makes operators, ``approvers`` approvers and ``senders`` senders; a ``[roles]``
table says otherwise::

    [roles]
    operator = ["ops"]
    approver = ["ops", "finance"]

User and group names share the namespace of an action's approvers, so no user may be named like a
group.
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


VIEWER, OPERATOR, APPROVER, SENDER = "viewer", "operator", "approver", "sender"
DEFAULT_ROLES: dict[str, frozenset[str]] = {
    OPERATOR: frozenset({"operators"}),
    APPROVER: frozenset({"approvers"}),
    SENDER: frozenset({"senders"}),  # sends messages to runs, and nothing else an operator does
}


@dataclass(frozen=True)
class Principal:
    """A ``Principal`` is someone authenticated: ``how`` is ``token``, ``session``, ``header`` or
    ``cli``; ``where`` the client's address (or the CLI's host); ``roles`` what the users file's
    groups grant (``viewer`` always)."""

    name: str
    groups: frozenset[str] = field(default_factory=frozenset)
    how: str = "token"
    where: str = ""
    roles: frozenset[str] = frozenset({VIEWER})

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
    """``Users`` is the users file: its users and the groups that grant each role."""

    def __init__(
        self,
        users: Mapping[str, User],
        path: Path | None = None,
        roles: Mapping[str, frozenset[str]] | None = None,
    ) -> None:
        self.users = dict(users)
        self.path = path
        self.explicit_roles = roles is not None  # a [roles] table: written back by users add
        self.roles = dict(DEFAULT_ROLES if roles is None else roles)

    def roles_of(self, groups: frozenset[str]) -> frozenset[str]:
        """The roles these groups grant, ``viewer`` included."""
        return frozenset({VIEWER} | {r for r, gs in self.roles.items() if not gs.isdisjoint(groups)})

    def tokens(self) -> dict[str, str]:
        """Each user who has a token, and its hash."""
        return {u.name: u.token_hash for u in self.users.values() if u.token_hash is not None}

    def groups(self) -> set[str]:
        """Every group named in the file: the users' groups and the roles' groups."""
        return {g for u in self.users.values() for g in u.groups} | {
            g for gs in self.roles.values() for g in gs
        }

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
        found = cls(users, path, _roles(path, data.get("roles")))
        clash = sorted(set(users) & found.groups())
        if clash:
            raise ConfigError(
                f"users file {path}: {', '.join(map(repr, clash))} is both a user and a group; "
                "an action's approvers name both, so rename the user or the group"
            )
        return found

    def by_token(self, token: str, how: str = "token", where: str = "") -> Principal | None:
        """The principal whose token this is, or None. Every user is compared (constant time)."""
        wanted = hash_token(token)
        found = None
        for user in self.users.values():
            if user.token_hash is not None and hmac.compare_digest(user.token_hash, wanted):
                found = user
        return None if found is None else self.principal(found, how, where)

    def principal(self, user: User, how: str, where: str) -> Principal:
        return Principal(user.name, user.groups, how, where, self.roles_of(user.groups))

    def named(self, name: str, how: str, where: str) -> Principal | None:
        """A principal vouched for by a trusted proxy: groups from the file when listed there;
        None when the name is one of the file's groups (it would pass for the group)."""
        user = self.users.get(name)
        if user is not None:
            return self.principal(user, how, where)
        return None if name in self.groups() else Principal(name, frozenset(), how, where)


def _roles(path: Path, table: Any) -> dict[str, frozenset[str]] | None:
    """The ``[roles]`` table: role name to the groups that grant it (None: the defaults)."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(f"users file {path}: 'roles' must be a table of role = [groups]")
    roles = {}
    for role, groups in table.items():
        if role not in DEFAULT_ROLES:
            raise ConfigError(
                f"users file {path}: no role {role!r}: the roles are {OPERATOR}, {APPROVER} and {SENDER} "
                f"(everyone signed in is a {VIEWER})"
            )
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise ConfigError(f"users file {path}: roles.{role} must be a list of group names")
        roles[role] = frozenset(check_principal_name(g, f"users file {path}: roles.{role}") for g in groups)
    return roles


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
    known = Users.load(path) if path.exists() else Users({})
    users = known.users
    others = {g for u in users.values() if u.name != name for g in u.groups} | {
        g for gs in known.roles.values() for g in gs
    }
    if name in others | set(groups) or not set(users).isdisjoint(groups):
        raise ConfigError(
            f"users file {path}: a user and a group may not share a name (an action's approvers "
            f"name both): choose another name for {name!r} or its groups {groups}"
        )
    token = new_token()
    users[name] = User(name, frozenset(groups), hash_token(token))
    lines = []
    if known.explicit_roles:
        lines.append("[roles]")
        lines += [f"{role} = {json.dumps(sorted(gs))}" for role, gs in sorted(known.roles.items())]
        lines.append("")
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
