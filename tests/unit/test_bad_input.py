"""Bad input: a one-line error naming the fix, nothing written, never a traceback.

No server here: the client's checks run before it connects (its URLs point at a closed port),
so a refusal proves nothing was written; the CLI runs in-process under click's CliRunner.
"""

from __future__ import annotations

import json
import reprlib
import secrets
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings, strategies as st

from outlast import InvalidInput
from outlast._journal import MAX_DEPTH, canonical
from outlast.cli import cli
from outlast.errors import ConfigError
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.store import redact

NOWHERE = {
    "OUTLAST_DATABASE_URL": "postgresql://u:secret@127.0.0.1:1/x",
    "OUTLAST_REDIS_URL": "redis://127.0.0.1:1/0",
}


def nested(depth: int) -> Any:
    """A list ``depth`` levels deep, built without recursion."""
    top: list[Any] = []
    inner = top
    for _ in range(depth - 1):
        inner.append([])
        inner = inner[0]
    return top


# -- settings ------------------------------------------------------------------------------

BAD_SETTINGS = [
    ("OUTLAST_LEASE_TTL", ["abc", "0", "-5", "inf", "nan", "1e12", "0.4", "3601"]),
    ("OUTLAST_SWEEP_INTERVAL", ["0", "60.5", "-inf"]),
    ("OUTLAST_REPUBLISH_AFTER", ["0.05", "86401", "NaN"]),
    ("OUTLAST_GRACE", ["-1", "3601"]),
    ("OUTLAST_CONCURRENCY", ["0", "4097", "1.5", "lots"]),
    ("OUTLAST_MAX_ATTEMPTS", ["0", "1001", "1e3"]),
    ("OUTLAST_STORE_RETRY", ["-1", "3601", "inf"]),
    ("OUTLAST_MAX_PAYLOAD", ["1023", str(256 * 2**20 + 1), "1MB"]),
    ("OUTLAST_SCHEMA", ["x -c statement_timeout=1", "Outlast", "1st", "a" * 64, "a;b", "a\x00"]),
    ("OUTLAST_PREFIX", ["a b", "{x}", "p\x00", "p" * 101]),
    ("OUTLAST_QUEUE", ["q\tq", "{q}", "q" * 101]),
    ("OUTLAST_LOG_FORMAT", ["xml"]),
    ("OUTLAST_FAILPOINTS", ["after_lunch", "before_ack,bogus:tool"]),
    ("OUTLAST_WORKER_NAME", ["a b", "w\x00"]),
    ("OUTLAST_DATABASE_URL", ["http://u:secret@h/db", "postgresql://u:secret@[::1/db", "host=h dbname=d"]),
    ("OUTLAST_DATABASE_URL", ["postgresql://u:secret@h:abc/db", "postgresql://u:secret@h/db?bogus=1"]),
    ("OUTLAST_REDIS_URL", ["redis://:secret@h:99999/0", "unix://", "http://h", "redis://:secret@[::1/0"]),
]


@pytest.mark.parametrize(
    ("var", "value"), [(var, v) for var, values in BAD_SETTINGS for v in values], ids=reprlib.repr
)
def test_a_bad_setting_is_refused_in_one_line_naming_its_variable(var: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({var: value})
    message = str(caught.value)
    assert message.startswith(var) and "\n" not in message
    assert "secret" not in message


def test_bounds_are_inclusive_and_say_so() -> None:
    s = Settings.from_env(
        {
            "OUTLAST_LEASE_TTL": "0.5",
            "OUTLAST_SWEEP_INTERVAL": "60",
            "OUTLAST_REPUBLISH_AFTER": "0.1",
            "OUTLAST_GRACE": "0",
            "OUTLAST_CONCURRENCY": "4096",
            "OUTLAST_MAX_ATTEMPTS": "1",
            "OUTLAST_STORE_RETRY": "0",
            "OUTLAST_MAX_PAYLOAD": "1024",
        }
    )
    assert (s.lease_ttl, s.sweep_interval, s.concurrency, s.store_retry, s.max_payload) == (
        0.5,
        60,
        4096,
        0,
        1024,
    )
    with pytest.raises(ConfigError, match=r"OUTLAST_LEASE_TTL .* in \[0\.5, 3600\]"):
        Settings.from_env({"OUTLAST_LEASE_TTL": "0"})
    with pytest.raises(ConfigError, match=r"OUTLAST_SWEEP_INTERVAL .* in \(0, 60\]"):
        Settings.from_env({"OUTLAST_SWEEP_INTERVAL": "0"})


def test_new_settings_have_defaults_and_variables() -> None:
    s = Settings()
    assert (s.store_retry, s.max_payload) == (60.0, 1048576)
    s = Settings.from_env({"OUTLAST_STORE_RETRY": "5", "OUTLAST_MAX_PAYLOAD": "2048"})
    assert (s.store_retry, s.max_payload) == (5.0, 2048)


def test_every_way_of_making_settings_checks_them() -> None:
    with pytest.raises(ConfigError, match="OUTLAST_CONCURRENCY"):
        Settings().with_(concurrency=0)
    with pytest.raises(ConfigError, match="OUTLAST_LEASE_TTL"):
        Settings(lease_ttl=float("nan"))
    with pytest.raises(ConfigError, match="OUTLAST_MAX_ATTEMPTS"):
        Settings.from_env({}, max_attempts=True)
    # An override wins, and the variable it replaces is not even read.
    assert Settings.from_env({"OUTLAST_LEASE_TTL": "abc"}, lease_ttl=3).lease_ttl == 3
    # An empty variable counts as unset.
    assert Settings.from_env({"OUTLAST_LEASE_TTL": "", "OUTLAST_SCHEMA": ""}).schema == "outlast"


WEAK_KEYS = ["a" * 32, "password" * 4, "k" * 40, "Tr0ub4dor&3" * 3, "0123" * 10]


@pytest.mark.parametrize("weak", WEAK_KEYS)
def test_a_predictable_secret_key_is_refused_saying_how_to_make_one(weak: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"OUTLAST_SECRET_KEY": weak})
    message = str(caught.value)
    assert message.startswith("OUTLAST_SECRET_KEY is too predictable") and "\n" not in message
    assert "secrets.token_urlsafe(32)" in message and weak not in message
    with pytest.raises(ConfigError, match="too predictable"):
        Settings(secret_key=weak)


def test_random_secret_keys_pass() -> None:
    """Keys made at random pass: the suggested command's, hex and even digits only."""
    for _ in range(200):
        for key in (
            secrets.token_urlsafe(32),
            secrets.token_hex(16),
            "".join(secrets.choice("0123456789") for _ in range(32)),
        ):
            assert Settings(secret_key=key).secret_key == key


def test_good_urls_pass() -> None:
    for db in ("postgresql://u:p@h:5432/db", "postgres://h/db", "postgresql://h1:5432,h2:5433/db"):
        assert Settings(database_url=db).database_url == db
    for rd in ("redis://h:6379/0", "rediss://:p@h", "unix:///run/redis.sock"):
        assert Settings(redis_url=rd).redis_url == rd


def test_redact_never_raises_and_hides_every_password() -> None:
    assert redact("postgresql://u:secret@[::1/db") == "postgresql://u:***@[::1/db"
    assert "secret" not in redact("postgresql://h/db?password=secret&sslmode=require")
    assert redact("not a url at all") == "not a url at all"


# -- canonical -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"a": "x\x00y"}, "NUL"),
        ({"x\x00": 1}, "NUL"),
        ([["\\\x00"]], "NUL"),
        ({"a": float("nan")}, "NaN or infinity"),
        ([float("-inf")], "NaN or infinity"),
        ({"a": "\ud800"}, "surrogate"),
        (nested(MAX_DEPTH + 1), "deeper than 200"),
        (nested(50_000), "deeper than 200"),
        ({"a": object()}, "not JSON"),
    ],
    ids=[
        "nul",
        "nul-key",
        "escaped-backslash-nul",
        "nan",
        "inf",
        "surrogate",
        "201-deep",
        "50k-deep",
        "object",
    ],
)
def test_canonical_refuses_what_cannot_be_stored(value: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as caught:
        canonical(value)
    assert isinstance(caught.value, ValueError)  # as JSON errors always were
    assert "\n" not in str(caught.value) and "\x00" not in str(caught.value)


def test_canonical_keeps_what_only_looks_bad() -> None:
    assert canonical({"a": "\\u0000"}) == '{"a":"\\\\u0000"}'  # a backslash, then "u0000"
    assert canonical({"a": "[[[[" * 100}) == json.dumps({"a": "[[[[" * 100}, separators=(",", ":"))
    assert len(canonical(nested(MAX_DEPTH))) == 2 * MAX_DEPTH


def test_canonical_limit_counts_utf8_bytes() -> None:
    assert canonical({"a": "é" * 500}, limit=1024)
    with pytest.raises(InvalidInput, match="over the limit of 1024"):
        canonical({"a": "é" * 600}, limit=1024)


# -- client --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"input": None}, "the input is null"),
        ({"input": [1]}, "must be a JSON object"),
        ({"input": {"a": "\x00"}}, "NUL"),
        ({"input": {"a": float("inf")}}, "NaN or infinity"),
        ({"input": {"a": nested(50_000)}}, "deeper than 200"),
        ({"input": {"a": "x" * 2000}}, "over the limit of 1024"),
        ({"run_id": ""}, "run id must be 1 to 200"),
        ({"run_id": "a\x00b"}, "run id must be"),
        ({"run_id": "r" * 201}, "run id must be"),
        ({"queue": "a b"}, "the queue must be"),
        ({"queue": "q\x00"}, "the queue must be"),
        ({"deadline": 1e300}, "deadline must be"),
        ({"deadline": float("nan")}, "deadline must be"),
        ({"deadline": 0}, "deadline must be"),
        ({"deadline": -5}, "deadline must be"),
        ({"budget": {"usd": float("nan")}}, "budget 'usd' must be a finite number"),
        ({"budget": {"usd": float("inf")}}, "budget 'usd' must be a finite number"),
        ({"budget": {"usd": -1}}, "budget 'usd' must be"),
        ({"budget": {"": 1}}, "budget's name"),
    ],
    ids=reprlib.repr,
)
async def test_enqueue_refuses_bad_input_before_connecting(call: dict[str, Any], expected: str) -> None:
    client = AsyncClient(settings=Settings.from_env(NOWHERE, max_payload=1024, max_referenced=1024))
    args = {"input": {"ok": 1}, "run_id": "r-1", **call}
    try:
        with pytest.raises(InvalidInput, match=expected) as caught:
            await client.enqueue("echo", args.pop("input"), **args)
    finally:
        await client.close()
    message = str(caught.value)
    assert "\n" not in message and "\x00" not in message
    if call.get("run_id", "r-1") == "r-1":
        assert message.startswith("run 'r-1': ")


async def test_client_reads_refuse_bad_ids_and_limits_before_connecting() -> None:
    client = AsyncClient(settings=Settings.from_env(NOWHERE))
    try:
        with pytest.raises(InvalidInput, match="a run id must be"):
            await client.status("a\x00b")
        with pytest.raises(InvalidInput, match="from 1 to 10000"):
            await client.runs(limit=-1)
        with pytest.raises(InvalidInput, match="the result is refused"):
            await client.resolve("r-1", "op-1", executed=True, result={"a": "\x00"})
    finally:
        await client.close()


# -- the command line ----------------------------------------------------------------------


def invoke(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**NOWHERE, **(env or {})}, input=stdin)


def assert_one_line_error(result: Result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("outlast: error: "), result.stderr
    assert "Traceback" not in result.output and "secret" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["runs", "--limit", "-1"], {}, "'--limit': -1 is not in the range 1<=x<=10000"),
        (["runs", "--limit", "0"], {}, "--limit"),
        (["enqueue", "echo", "--deadline", "1e300"], {}, "deadline must be"),
        (["enqueue", "echo", "--deadline", "nan"], {}, "deadline must be"),
        (["enqueue", "echo", "--input", "null"], {}, "the input is null"),
        (["enqueue", "echo", "--input", '{"a": "\\u0000"}'], {}, "NUL"),
        (["enqueue", "echo", "--input", '{"a": NaN}'], {}, "NaN or infinity"),
        (["enqueue", "echo", "--input", "[" * 50_000 + "]" * 50_000], {}, "nested deeper than 200"),
        (["enqueue", "echo", "--input", '{"a":' + "[" * 300 + "]" * 300 + "}"], {}, "nested deeper than 200"),
        (["enqueue", "echo", "--input", "1" * 5000], {}, "not valid JSON"),
        (["enqueue", "echo", "--run-id", "a\x00b"], {}, "run id must be"),
        (["enqueue", "echo", "--queue", "a\x00b"], {}, "the queue must be"),
        (["enqueue", "echo", "--input", "{}", "--input-file", "x.json"], {}, "not both"),
        (["enqueue", "echo", "--input-file", "/no/such/file"], {}, "cannot read"),
        (["worker", "tests.apps.basic:app", "-c", "0"], {}, "'--concurrency' / '-c'"),
        (["worker", "tests.apps.basic:app", "--max-attempts", "0"], {}, "--max-attempts"),
        (["worker", "tests.apps.basic:app", "-p", "0"], {}, "--processes"),
        (["worker", "tests.apps.basic:app", "--lease-ttl", "nan"], {}, "--lease-ttl"),
        (["worker", "tests.apps.basic:app", "-q", "a b"], {}, "queue name must be"),
        (["runs"], {"OUTLAST_LEASE_TTL": "1e12"}, "OUTLAST_LEASE_TTL must be a finite number"),
        (["runs"], {"OUTLAST_SCHEMA": "x -c statement_timeout=1"}, "OUTLAST_SCHEMA must be"),
        (["runs"], {"OUTLAST_DATABASE_URL": "postgresql://u:secret@[::1/x"}, "OUTLAST_DATABASE_URL"),
        (["--schema", "X", "runs"], {}, "OUTLAST_SCHEMA must be"),
        (["continue", "r-1", "--input", "null"], {}, "must be a JSON object"),
        (["resolve", "r-1", "op-1", "--executed", "--result", "[" * 50_000], {}, "nested deeper"),
    ],
    ids=reprlib.repr,
)
def test_cli_bad_values_print_one_line_and_exit_2(
    args: list[str], env: dict[str, str], expected: str
) -> None:
    assert expected in assert_one_line_error(invoke(*args, env=env))


def test_cli_reads_large_input_from_a_file_or_stdin(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"a": "x" * 2000}))
    line = assert_one_line_error(
        invoke(
            "enqueue",
            "echo",
            "--input-file",
            str(big),
            env={"OUTLAST_MAX_PAYLOAD": "1024", "OUTLAST_MAX_REFERENCED": "1024"},
        )
    )
    assert "over the limit of 1024 (OUTLAST_MAX_REFERENCED)" in line
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"a": "\xff"}')
    assert "not UTF-8" in assert_one_line_error(invoke("enqueue", "echo", "--input-file", str(bad)))
    assert "the input is null" in assert_one_line_error(
        invoke("enqueue", "echo", "--input", "-", stdin="null")
    )
    # Good input gets as far as the (closed) server: one line, exit 1, the password hidden.
    for args in (["--input-file", str(big)], ["--input", "-"], ["--input-file", "-"]):
        line = assert_one_line_error(invoke("enqueue", "echo", *args, stdin='{"a": 1}'), exit_code=1)
        assert "cannot reach Postgres" in line


JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
ENV_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
SETTINGS_VARS = [
    "OUTLAST_LEASE_TTL",
    "OUTLAST_CONCURRENCY",
    "OUTLAST_SCHEMA",
    "OUTLAST_PREFIX",
    "OUTLAST_QUEUE",
    "OUTLAST_DATABASE_URL",
    "OUTLAST_REDIS_URL",
    "OUTLAST_MAX_PAYLOAD",
    "OUTLAST_SWEEP_INTERVAL",
]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_no_traceback(result: Result) -> None:
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    if result.exit_code:
        assert len(result.stderr.splitlines()) == 1, result.stderr


@FUZZ
@given(text=st.one_of(TEXT, JSON.map(json.dumps), st.integers(0, 3000).map(lambda n: "[" * n + "]" * n)))
def test_fuzzed_input_never_gives_a_traceback(text: str) -> None:
    assert_no_traceback(invoke("enqueue", "echo", "--run-id", "fuzz", "--input", text))


@FUZZ
@given(limit=st.one_of(st.integers().map(str), TEXT), state=st.one_of(st.none(), TEXT))
def test_fuzzed_runs_options_never_give_a_traceback(limit: str, state: str | None) -> None:
    args = ["runs", "--limit", limit] + ([] if state is None else ["--state", state])
    assert_no_traceback(invoke(*args))


@FUZZ
@given(var=st.sampled_from(SETTINGS_VARS), value=ENV_TEXT, run_id=TEXT, deadline=TEXT)
def test_fuzzed_settings_and_options_never_give_a_traceback(
    var: str, value: str, run_id: str, deadline: str
) -> None:
    args = ["enqueue", "echo", "--run-id", run_id, "--deadline", deadline]
    assert_no_traceback(invoke(*args, env={var: value}))
