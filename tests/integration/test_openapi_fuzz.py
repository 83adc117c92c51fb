"""Schemathesis fuzzes every operation of the OpenAPI document, as served by a real ``outlast
dashboard``, as each role (viewer, sender, operator, approver): no answer is a 500, none is
outside the document (its status and content type declared, its body of the declared schema), and
every 4xx says why in ``{"error": ...}``. Half the cases name real runs (a finished one, one waiting
on an approval) and a real callback token, so the handlers past the 404 are reached too."""

from __future__ import annotations

import os
import secrets
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2 as httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings, strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from outlast import Client
from outlast._callbacks import sign
from outlast.dashboard.openapi import DOCUMENT
from outlast.identity import add_user
from tests.conftest import World
from tests.dashboard import DESK, dashboard_process

pytestmark = pytest.mark.slow

ROLES = '[roles]\noperator = ["oncall"]\napprover = ["ops"]\nsender = ["senders"]\n\n'
PEOPLE = {"viewer": "viewers", "sender": "senders", "operator": "oncall", "approver": "ops"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
# Runs that wait: on an approval (op-1), a request (op-1), an in-doubt charge (op-1, once it times out).
WAITING = {"post": {"text": "p"}, "refund": {"order": "o-1"}, "bill": {"amount": 5}}
# Per operation and role, either mode: ~340 requests in all, ~30 s on a quiet machine. A longer hunt:
# OUTLAST_TEST_FUZZ_EXAMPLES=30 (its timeout grows with it).
EXAMPLES = int(os.environ.get("OUTLAST_TEST_FUZZ_EXAMPLES", "3"))
# Cases longer hunts found, each as every role: (the operation, its path parameters and query,
# the status). A path parameter holding a / (percent-encoded), or a run id a newline: a URL no route
# takes (404), or a GET's (405). A cursor whose signature is not ASCII (was a 500: compare_digest).
FOUND: list[tuple[str, dict[str, str], dict[str, str], int]] = [
    ("GET /api/runs/{run_id}", {"run_id": "a\nb"}, {}, 404),
    ("POST /api/runs/{run_id}/cancel", {"run_id": "a\nb"}, {}, 404),
    ("POST /api/runs/{run_id}/messages/{channel}", {"channel": "a/b"}, {}, 405),
    ("POST /callbacks/{token}", {"token": "a/b"}, {}, 404),
    ("GET /api/in-doubt", {}, {"cursor": "x.\u00e9"}, 400),
    ("GET /api/runs", {}, {"cursor": "x.\u00e9"}, 400),
]
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,  # with the seed of each operation and role: the same cases every run
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)


def _fuzz(
    base: str,
    who: tuple[str, str],
    operation: Any,
    modes: tuple[GenerationMode, ...],
    real: dict[str, list[str]],
) -> Counter[int]:
    """Fuzz ``operation`` as ``who`` (a role and its token): the same cases every run, so that a
    failure here is one to read, not a flake. The statuses it answered."""
    role, token = who
    names = [p.name for p in operation.path_parameters]
    swaps = st.fixed_dictionaries({n: st.sampled_from(["", *real[n]]) for n in names if n in real})
    cases = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))
    seen: Counter[int] = Counter()

    @FUZZ
    @seed(zlib.crc32(f"{operation.label} as {role}".encode()))
    @given(case=cases, swap=swaps)
    def one(case: Any, swap: dict[str, str]) -> None:
        case.path_parameters.update({name: value for name, value in swap.items() if value})
        response = case.call(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=20)
        seen[response.status_code] += 1
        case.validate_response(response, checks=CHECKS)
        if 400 <= response.status_code < 500:
            assert response.json()["error"].strip(), response.text

    one()
    return seen


@pytest.mark.timeout(100 * EXAMPLES)  # a loaded machine (the suite's -n 3) takes twice as long
def test_every_operation_fuzzed_as_each_role(world: World) -> None:
    users = world.tmp / "users.toml"
    users.write_text(ROLES)
    tokens = {role: add_user(users, role, [group]) for role, group in PEOPLE.items()}
    key = secrets.token_hex(32)
    world.worker(DESK)
    base = dashboard_process(
        world, OUTLAST_USERS=str(users), OUTLAST_SECRET_KEY=key, OUTLAST_LIVE_SECONDS="1"
    )
    with Client(settings=world.settings(users=str(users))) as c:
        done = c.enqueue("kid", {"text": "k"}).id
        waiting = [c.enqueue(name, args).id for name, args in WAITING.items()]
        listener = c.enqueue("post", {"text": "a callback's"}).id  # named by no act: it stays waiting
        c.wait(done, timeout=20)
    later = datetime.now(UTC) + timedelta(hours=1)
    served = httpx.get(base + "/api/openapi.json", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert served.status_code == 200 and served.json()["paths"] == DOCUMENT["paths"]
    assert served.json()["servers"] == [{"url": "/"}]
    schema = schemathesis.openapi.from_dict(served.json())
    ops = ["op-1", "op-2"]
    real = {
        "run_id": [done, *waiting],
        "approval_id": ops,
        "request_id": ops,
        "op_id": ops,
        "channel": ["note"],
    }
    real["token"] = [sign(key, listener, "note", later), sign(key, done, "note", later)]
    seen: Counter[int] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        # Every stream of the API ends after OUTLAST_LIVE_SECONDS (1 s here), any run's; junk in
        # Last-Event-ID or ?after= is a 400 with its reason.
        modes = tuple(GenerationMode)
        named = real
        for who in tokens.items():
            seen += _fuzz(base, who, operation, modes, named)
    for label, params, query, status in FOUND:
        operation = schema.find_operation_by_label(label)
        for token in tokens.values():
            case = operation.Case(path_parameters={"run_id": done, **params}, query=query)
            response = case.call(base_url=base, headers={"Authorization": f"Bearer {token}"})
            case.validate_response(response, checks=CHECKS)
            assert response.status_code == status and response.json()["error"].strip(), (label, response.text)
    page = httpx.get(base + "/nope", headers={"Authorization": f"Bearer {tokens['viewer']}"})
    assert page.status_code == 404 and page.text == "Not Found"  # a page's, as before
    assert set(seen) >= {200, 400, 403, 404, 409}, seen  # the fuzz went past the roles and the 404s
    assert seen[201] + seen[202] > 0, seen  # a message sent, a callback taken
