"""Principals, the users file and the trusted-proxy check."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from outlast.errors import ConfigError
from outlast.identity import Principal, Users, add_user, hash_token, trusted


def test_a_user_added_signs_in_with_the_token_shown_once_and_the_file_keeps_only_its_hash(
    tmp_path: Path,
) -> None:
    path = tmp_path / "users.toml"
    token = add_user(path, "alice", ["ops", "finance"])
    other = add_user(path, "bob", [])
    text = path.read_text()
    assert token not in text and other not in text and hash_token(token) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    users = Users.load(path)
    alice = users.by_token(token, where="10.0.0.5")
    assert alice == Principal("alice", frozenset({"ops", "finance"}), "token", "10.0.0.5")
    assert users.by_token(other) == Principal("bob", frozenset(), "token", "")
    assert users.by_token(token + "x") is None
    renewed = add_user(path, "alice", ["ops"])  # a new token replaces the old one
    assert Users.load(path).by_token(token) is None
    assert Users.load(path).by_token(renewed) is not None


def test_approvers_name_users_or_groups() -> None:
    alice = Principal("alice", frozenset({"ops"}))
    assert alice.may(["ops"]) and alice.may(["alice"]) and not alice.may(["finance", "bob"])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("users = 3", "must be a table"),
        ('[users."a b"]', "a user name"),
        ("[users.a]\ngroups = 'ops'", "groups must be a list"),
        ("[users.a]\ntoken = 'plain-token'", "a hash, never the token"),
        ("[users", "not valid TOML"),
    ],
)
def test_a_bad_users_file_is_refused_in_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "users.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=says):
        Users.load(path)


def test_a_header_is_believed_only_from_a_trusted_proxy() -> None:
    proxies = ["127.0.0.1", "10.1.0.0/16"]
    assert trusted("127.0.0.1", proxies) and trusted("10.1.2.3", proxies)
    assert not trusted("10.2.0.1", proxies) and not trusted("not-an-address", proxies)
