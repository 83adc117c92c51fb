"""The keyed hash of secret arguments and the redaction of tool errors (outlast/secrets.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from outlast import App
from outlast.errors import ConfigError
from outlast.secrets import Secrets, require_key

KEY = "k" * 32


def make_app(**kw: Any) -> App:
    app = App(**kw)

    @app.tool("call", secret=["token"])
    def call(token: str, n: int = 0) -> None:
        raise RuntimeError(f"denied {token}")

    return app


def test_a_secret_argument_is_sealed_with_the_key() -> None:
    app = make_app()
    sealed = Secrets(app, KEY).seal("call", {"token": "abc", "n": 1})
    assert sealed["n"] == 1 and sealed["token"]["secret"].startswith("hmac-sha256:")
    assert "abc" not in str(sealed)
    assert Secrets(app, KEY).seal("call", {"token": "abc", "n": 1}) == sealed  # the replay's hash
    assert Secrets(app, KEY).seal("call", {"token": "abd", "n": 1}) != sealed  # binds the value
    assert Secrets(app, "j" * 32).seal("call", {"token": "abc", "n": 1}) != sealed  # keyed
    assert Secrets(app, KEY).seal("other", {"token": "abc"}) == {"token": "abc"}  # not a tool's secret


def test_changed_names_the_argument_never_its_value() -> None:
    s = Secrets(make_app(), KEY)
    journaled = s.seal("call", {"token": "one", "n": 1})
    said = s.changed("call", journaled, s.seal("call", {"token": "two", "n": 1}))
    assert "'token'" in said and "one" not in said and "two" not in said
    assert s.changed("call", journaled, s.seal("call", {"token": "one", "n": 2})) == ""


def test_unseal_gives_back_only_what_still_matches() -> None:
    s = Secrets(make_app(), KEY)
    real = {"token": "abc", "n": 1}
    revised = {**s.seal("call", real), "n": 2}
    assert s.unseal("call", revised, real) == {"token": "abc", "n": 2}
    other = {"token": {"secret": "hmac-sha256:00"}, "n": 2}
    assert s.unseal("call", other, real) == other


def test_the_default_redaction_masks_the_calls_secret_values() -> None:
    s = Secrets(make_app(), KEY)
    assert s.redact("call", {"token": "abc", "n": 1}, "denied abc, n=1") == "denied [secret], n=1"
    assert s.redact("call", {"token": "", "n": 1}, "denied") == "denied"


def test_a_redaction_hook_runs_first_and_the_mask_after_it() -> None:
    seen: list[Mapping[str, Any]] = []

    def hook(message: str, secrets: Mapping[str, Any]) -> str:
        seen.append(secrets)
        return message.replace("host-7", "[host]")

    s = Secrets(make_app(redact=hook), KEY)
    assert s.redact("call", {"token": "abc", "n": 1}, "abc on host-7") == "[secret] on [host]"
    assert seen == [{"token": "abc"}]


def test_the_redactor_decorator_and_a_hook_that_raises() -> None:
    app = make_app()

    @app.redactor
    def broken(message: str, secrets: Mapping[str, Any]) -> str:
        raise ValueError(message)

    said = Secrets(app, KEY).redact("call", {"token": "abc"}, "abc")
    assert said == "(message withheld: the redaction hook raised ValueError)"


def test_secret_must_name_an_argument() -> None:
    app = App()
    with pytest.raises(TypeError, match="secret names no argument of it: tokn"):

        @app.tool("call", secret=["tokn"])
        def call(token: str) -> None: ...


def test_the_key_is_required_once_a_tool_declares_a_secret() -> None:
    require_key(App(), None)
    with pytest.raises(ConfigError, match=r"OUTLAST_SECRET_KEY is not set.*call\(token\)"):
        require_key(make_app(), None)
