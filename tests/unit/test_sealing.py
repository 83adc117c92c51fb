"""The keyed hash of secret arguments and the redaction of tool errors (outlast/_secrets.py)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from outlast import App
from outlast._secrets import Secrets, check_revision, forms, require_key, shown_sealed
from outlast.errors import ConfigError, DecisionRefused, InvalidInput

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


def test_the_values_a_run_sealed_are_scrubbed_out_of_anything_else() -> None:
    s = Secrets(make_app(), KEY)
    assert s.scrub({"k": "tok-123456"}) == {"k": "tok-123456"}  # nothing sealed yet: nothing known
    s.seal("call", {"token": "tok-123456", "n": 1})
    s.seal("call", {"token": "abc"})  # too short to be searched for in text
    got = s.scrub({"said tok-123456": ["x tok-123456 y", 7, ("tok-123456",)], "abc": "abc"})
    assert got == {"said [secret]": ["x [secret] y", 7, ("[secret]",)], "abc": "abc"}
    assert s.redact("other", {}, "an error quoting tok-123456") == "an error quoting [secret]"
    # An approval's arguments as shown: left as shown, the workflow gets its own values back.
    shown = s.scrub(s.seal("call", {"token": "tok-123456", "n": 2}))
    real = {"token": "tok-123456", "n": 2}
    assert s.unseal("call", shown, real) == real
    assert s.unseal("call", {**shown, "n": 3}, real) == {"token": "tok-123456", "n": 3}


def test_a_revision_may_not_type_a_sealed_argument() -> None:
    asked = Secrets(make_app(), KEY).seal("call", {"token": "tok-123456", "n": 1})
    check_revision(asked, {**asked, "n": 2}, "run 'r', approval op-1")  # kept as shown
    check_revision(asked, {"n": 2}, "run 'r', approval op-1")  # left out
    with pytest.raises(DecisionRefused, match="secret argument 'token' a new value") as refused:
        check_revision(asked, {**asked, "token": "tok-999999"}, "run 'r', approval op-1")
    assert "tok-999999" not in str(refused.value) and "run 'r', approval op-1" in str(refused.value)


ESCAPED = [  # each holds "k3y-4242", which every form of it keeps as is
    "-----BEGIN PRIVATE KEY-----\nk3y-4242\nAQAB\n-----END PRIVATE KEY-----\n",
    'it\'s "k3y-4242"',
    "C:\\keys\\k3y-4242\\",
    "k3y-4242\n",
    "clé k3y-4242 ключ",
]


@pytest.mark.parametrize("value", ESCAPED, ids=["pem", "quotes", "backslashes", "line", "non-ascii"])
def test_a_known_value_is_masked_in_each_form_it_is_written_in(value: str) -> None:
    s = Secrets(make_app(), KEY)
    s.seal("call", {"token": value})
    written = {
        "repr": repr(value),
        "ascii": ascii(value),
        "json": json.dumps({"key": value}),
        "json, not ascii": json.dumps({"key": value}, ensure_ascii=False),
        "json in a repr": repr(json.dumps({"key": value})),
        "url": f"https://api.example/v1?key={quote(value, safe='')}",
        "form": f"key={quote_plus(value, safe='')}",
        "stripped": f"key {value.strip()}.",
    }
    for how, text in written.items():
        assert "k3y-4242" not in s.scrub(f"said {text}"), how
        assert "k3y-4242" not in s.redact("other", {}, f"said {text}"), how
    q = repr(value)[0]
    assert s.scrub(f"bad key {value!r}") == f"bad key {q}[secret]{q}"
    assert s.scrub(json.dumps({"key": value})) == '{"key": "[secret]"}'
    assert json.loads(s.scrub(json.dumps({"key": value}))) == {"key": "[secret]"}


def test_the_calls_own_values_are_masked_in_each_form_however_short() -> None:
    s = Secrets(make_app(), KEY)
    assert s.redact("call", {"token": "a\nb"}, "bad key 'a\\nb'") == "bad key '[secret]'"
    assert s.scrub("bad key 'a\\nb'") == "bad key 'a\\nb'"  # sealed, but too short to be searched for


def test_a_plain_value_has_one_form_and_a_value_of_another_type_its_json_and_repr() -> None:
    assert forms("sk_live_0123456789") == {"sk_live_0123456789"}
    written = {'{"pin":"1234","user":"u1"}', '{"user": "u1", "pin": "1234"}', "{'user': 'u1', 'pin': '1234'}"}
    assert written <= forms({"user": "u1", "pin": "1234"})  # canonical JSON, json.dumps, repr


def test_a_revision_that_keeps_a_seal_leaves_it_out_of_the_type_check() -> None:
    app = make_app()
    asked = Secrets(app, KEY).seal("call", {"token": "tok-123456", "n": 1})
    kept = shown_sealed(asked, {**asked, "n": 2})
    assert kept == {"token"}
    app.tools["call"].check({**asked, "n": 2}, unchecked=kept)
    with pytest.raises(InvalidInput, match="token: Input should be a valid string"):
        app.tools["call"].check({**asked, "n": 2})
    with pytest.raises(InvalidInput, match="n: Input should be a valid integer"):
        app.tools["call"].check({**asked, "n": "two"}, unchecked=kept)
    assert shown_sealed(asked, {"token": "typed in clear", "n": 2}) == set()
