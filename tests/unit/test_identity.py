"""Principals, the users file and the trusted-proxy check."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from outlast._approvals import Proposed, Verdict, decider, judge
from outlast.errors import ConfigError, DecisionRefused, InvalidInput
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


def test_adding_a_user_replaces_the_file_whole_and_private(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    path.write_text('[users.bob]\ngroups = ["ops"]\n')
    path.chmod(0o644)
    token = add_user(path, "alice", [])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(Users.load(path).users) == ["alice", "bob"] and Users.load(path).by_token(token)
    assert [p.name for p in tmp_path.iterdir()] == ["users.toml"]  # no temporary file left


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_adding_a_user_to_a_yaml_file_is_refused_in_one_line(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"users{suffix}"
    path.write_text("users:\n  bob:\n    groups: [ops]\n")
    with pytest.raises(ConfigError, match=r"writes TOML only: .* is YAML; use a \.toml file") as refused:
        add_user(path, "alice", [])
    assert "\n" not in str(refused.value)
    assert path.read_text() == "users:\n  bob:\n    groups: [ops]\n"


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


# -- the rules of who decides (outlast._approvals), without a server --------------------------------

WHERE = "run 'r-1', approval op-1"


def request(authenticated: bool = False, approvers: tuple[str, ...] = ("ops",)) -> dict[str, Any]:
    return {
        "approvers": list(approvers),
        "authenticated": authenticated,
        "args_hash": "h" * 64,
        "status": "pending",
        "expired": False,
    }


def test_an_authenticated_principal_decides_as_itself_and_is_recorded_whole() -> None:
    alice = Principal("alice", frozenset({"ops"}), "session", "10.0.0.5")
    who, name = decider(alice, None, WHERE)
    assert (who, name) == (alice, "alice")
    proposed = Proposed("approved", who, name, "ok", "h" * 64)
    assert judge(request(authenticated=True), proposed, "r-1", WHERE) is Verdict.DECIDE
    assert proposed.who() == {"principal": "alice", "groups": ["ops"], "how": "session", "where": "10.0.0.5"}
    with pytest.raises(InvalidInput, match="the decider is the principal"):
        decider(alice, "ops", WHERE)  # a typed name never replaces the authenticated one
    outsider = Proposed("approved", Principal("mallory", frozenset({"dev"})), "mallory", "ok", "h" * 64)
    with pytest.raises(DecisionRefused, match=r"mallory \(groups: dev\) may not decide"):
        judge(request(), outsider, "r-1", WHERE)


def test_a_declared_name_is_checked_as_given_recorded_with_its_declarer_and_refused_if_authenticated() -> (
    None
):
    shell = Principal("mallory", frozenset(), "cli", "laptop-7")
    who, name = decider(shell, "ops", WHERE)
    proposed = Proposed("approved", who, name, "ok", "h" * 64)
    assert judge(request(), proposed, "r-1", WHERE) is Verdict.DECIDE
    assert proposed.who() == {
        "principal": "mallory",
        "groups": [],
        "how": "cli",
        "where": "laptop-7",
        "as": "ops",
    }
    with pytest.raises(DecisionRefused, match="which the cli cannot make: decide it in the dashboard"):
        judge(request(authenticated=True), proposed, "r-1", WHERE)
    program, as_ops = decider(None, "ops", WHERE)  # no principal: this process's user, how "client"
    assert program.how == "client" and as_ops == "ops" and program.where
    with pytest.raises(InvalidInput, match="say who decides"):
        decider(None, None, WHERE)
