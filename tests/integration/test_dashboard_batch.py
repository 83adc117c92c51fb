"""Batch acts on a filtered list, as a probe of the dashboard found them: a batch retry takes only
the runs that did not end well (a retry is a continuation, whose new idempotency keys pay again),
unless the operator names more states; the confirmation binds the runs it showed, not their number;
its page shows the filter and the runs by state."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app
from outlast.identity import add_user
from tests.conftest import World
from tests.crash import APP, bank_world, calls, settled


@pytest.fixture
def olga(world: World) -> Iterator[tuple[TestClient, dict[str, str], str]]:
    """The dashboard, an operator's bearer header and her token (to sign in with)."""
    users = world.tmp / "users.toml"
    token = add_user(users, "olga", ["operators"])
    settings = world.settings(users=str(users))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        yield tc, {"Authorization": f"Bearer {token}"}, token


def signed_in(tc: TestClient, token: str) -> None:
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', tc.get("/login").text)
    assert csrf is not None
    tc.post("/login", data={"csrf": csrf.group(1), "token": token}, follow_redirects=False)


def ended(world: World, c: Client, state: str, *run_ids: str) -> None:
    """Put runs nobody serves in a final state, as a worker would have ended them."""
    world.sql(
        "UPDATE runs SET state = %s, started_at = created_at, finished_at = now() WHERE id = ANY(%s)",
        state,
        list(run_ids),
    )


def test_a_batch_retry_takes_the_failed_runs_and_pays_no_succeeded_one_again(
    world: World, olga: tuple[TestClient, dict[str, str], str]
) -> None:
    tc, headers, _ = olga
    with bank_world(world) as c:
        world.worker(APP)
        paid = [c.enqueue("pay", {"amount": 10 + i, "to": f"acct-{i}"}).id for i in range(3)]
        # A payment without an amount is an invalid call of the transfer: the run fails there.
        refused = [c.enqueue("pay", {"amount": None, "to": f"acct-x{i}"}).id for i in range(2)]
        assert [settled(c, r).state for r in paid + refused] == ["succeeded"] * 3 + ["failed"] * 2
        pay = {"workflow": "pay"}

        conf = tc.get("/api/batch/retry", params=pay, headers=headers).json()
        assert conf["count"] == 2 and conf["states"] == {"failed": 2}, conf
        assert conf["left_out"] == {"succeeded": 3} and sorted(conf["runs"]) == sorted(refused)
        body = {"count": conf["count"], "digest": conf["digest"]}
        done = tc.post("/api/batch/retry", params=pay, headers=headers, json=body).json()
        assert sorted(done["done"]) == sorted(refused) and done["refused"] == {}

        said = {r: c.events(r) for r in paid + refused}
        continued = {r: [e["detail"]["as"] for e in said[r] if e["kind"] == "continued"] for r in said}
        assert [len(continued[r]) for r in paid + refused] == [0, 0, 0, 1, 1]
        for r in refused:  # the continuations ran, once each, and failed as their originals did
            new = continued[r][0]
            assert settled(c, new).state == "failed"
            assert calls(world, new) == calls(world, r) == {"balance": 1}
        # In the world: each succeeded payment was paid once, and no continuation paid again.
        assert world.sql("SELECT dest, count(*) FROM bank GROUP BY dest ORDER BY dest") == [
            (f"acct-{i}", 1) for i in range(3)
        ]
        assert all(calls(world, r)["transfer"] == 1 for r in paid)

        # Asked for explicitly, the succeeded runs are counted too (and said so by state).
        more = tc.get("/api/batch/retry", params={**pay, "include": "succeeded"}, headers=headers).json()
        assert more["include"] == ["succeeded"] and more["states"] == {"succeeded": 3, "failed": 4}, more
        wrong = tc.get("/api/batch/retry", params={**pay, "include": "running"}, headers=headers)
        assert wrong.status_code == 400 and "include takes succeeded or partial" in wrong.json()["error"]


def test_a_batch_act_is_refused_when_other_runs_match_than_those_confirmed(
    world: World, olga: tuple[TestClient, dict[str, str], str]
) -> None:
    tc, headers, _ = olga
    with Client(settings=world.settings()) as c:
        made = [c.enqueue("wc", {"n": i}, run_id=f"c-{i}").id for i in range(3)]  # nobody serves wc
        wc = {"workflow": "wc"}
        conf = tc.get("/api/batch/cancel", params=wc, headers=headers).json()
        assert conf["count"] == 3 and conf["states"] == {"queued": 3} and conf["filter"] == wc
        body = {"count": conf["count"], "digest": conf["digest"]}

        c.cancel("c-0")  # one counted run leaves the list, another joins: still three
        made.append(c.enqueue("wc", {"n": 3}, run_id="c-3").id)
        stale = tc.post("/api/batch/cancel", params=wc, headers=headers, json=body)
        assert stale.status_code == 409, stale.text
        assert "not the ones confirmed" in stale.json()["error"] and "review" in stale.json()["error"]
        assert [c.status(r).state for r in made] == ["cancelled", "queued", "queued", "queued"]

        c.enqueue("wc", {"n": 4}, run_id="c-4")
        more = tc.post("/api/batch/cancel", params=wc, headers=headers, json=body)
        assert more.status_code == 409 and "4 runs match now, not the 3 confirmed" in more.json()["error"]
        unsaid = tc.post("/api/batch/cancel", params=wc, headers=headers, json={"count": 4})
        assert unsaid.status_code == 400 and "digest" in unsaid.json()["error"]
        assert {c.status(f"c-{i}").state for i in range(1, 5)} == {"queued"}

        conf = tc.get("/api/batch/cancel", params=wc, headers=headers).json()  # reviewed again
        body = {"count": conf["count"], "digest": conf["digest"]}
        done = tc.post("/api/batch/cancel", params=wc, headers=headers, json=body).json()
        assert sorted(done["done"]) == [f"c-{i}" for i in range(1, 5)]


def test_the_confirmation_page_shows_the_filter_and_the_runs_by_state(
    world: World, olga: tuple[TestClient, dict[str, str], str]
) -> None:
    tc, _, token = olga
    with Client(settings=world.settings()) as c:
        runs = [c.enqueue("wr", {"n": i}, run_id=f"r-{i}", tenant="t1").id for i in range(6)]
        ended(world, c, "failed", *runs[:2])
        ended(world, c, "cancelled", runs[2])
        ended(world, c, "succeeded", *runs[3:])
        signed_in(tc, token)
        wr = {"workflow": "wr", "tenant": "t1"}

        page = tc.get("/batch/retry", params=wr)
        assert page.status_code == 200
        assert "<dt>workflow</dt><dd>wr</dd>" in page.text and "<dt>tenant</dt><dd>t1</dd>" in page.text
        assert "3 runs of this list are to retry (each as a continuation)" in page.text
        states = re.search(r'<ul class="counts" id="states">(.*?)</ul>', page.text)
        assert states is not None
        assert re.findall(r">(\d+ \w+)<", states.group(1)) == ["2 failed", "1 cancelled"]
        assert "Left out: 3 succeeded." in page.text

        asked = tc.get("/batch/retry", params={**wr, "include": "succeeded"})
        assert "6 runs of this list are to retry" in asked.text and "3 succeeded</li>" in asked.text
        assert "Retrying also the runs that are succeeded." in asked.text

        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        digest = re.search(r'name="digest" value="([0-9a-f]+)"', page.text)
        assert csrf is not None and digest is not None
        form = {"csrf": csrf.group(1), "count": "3", "digest": digest.group(1)}
        time.sleep(0.05)
        c.prune(0.01, state="cancelled")  # a counted run leaves (retention took it), another joins
        runs.append(c.enqueue("wr", {"n": 6}, run_id="r-6", tenant="t1").id)
        ended(world, c, "failed", "r-6")
        stale = tc.post("/batch/retry?workflow=wr&tenant=t1", data=form)
        assert stale.status_code == 409 and "not the ones confirmed" in stale.text
        assert 'id="review"' in stale.text and 'id="confirm"' not in stale.text
        assert [e for r in runs if r != "r-2" for e in c.events(r) if e["kind"] == "continued"] == []
