"""Paging through 10,000 runs in a real browser (Playwright driving Debian's Chromium): "Next page"
clicked through the first pages, pages in the middle and the last ones shows on each page exactly
the runs due there (so none before it was repeated or skipped), in order, while new runs are
enqueued between the clicks; and the page a person is on stays the same when the list refreshes
itself because runs arrived."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest

from outlast import Client
from outlast._listing import PAGE
from outlast.identity import add_user
from tests.browser import CHROMIUM, chromium, kept_world, person
from tests.conftest import World
from tests.dashboard import served

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium"),
]
pytest.importorskip("playwright.sync_api")

ROWS = 10_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# One statement: bulk-00001..bulk-10000, a second apart, finished (no sweeper hands them out).
SEED = """
INSERT INTO runs (id, workflow, queue, input, input_hash, state, created_at, started_at, finished_at)
SELECT 'bulk-' || lpad(i::text, 5, '0'), 'bulk', 'bulk', jsonb_build_object('n', i), 'h', 'succeeded',
       %s::timestamptz + make_interval(secs => i), %s::timestamptz + make_interval(secs => i),
       %s::timestamptz + make_interval(secs => i + 1)
FROM generate_series(1, %s) AS i
"""


@pytest.fixture(scope="module")
def seeded(
    services: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[World, str]]:
    """10,000 runs in a world of the module's own; the users file's viewer token."""
    with kept_world(*services, tmp_path_factory.mktemp("paging")) as w:
        w.sql(SEED, T0, T0, T0, ROWS)
        w.sql("ANALYZE runs")
        token = add_user(w.tmp / "users.toml", "bob", ["viewers"])
        yield w, token


def shown(page: Any) -> list[str]:
    return [t.strip() for t in page.locator("#runs tbody tr td:first-child").all_inner_texts()]


# The stretches of pages clicked through: the first, one in the middle, the last (jumping between
# them with a cursor the API gives after that many runs); runs arrive on the pages marked.
STRETCHES = ((1, 12), (100, 110), (192, ROWS // PAGE))
ARRIVE = (2, 8, 104, 195)


def test_next_page_through_ten_thousand_runs_while_runs_arrive(seeded: tuple[World, str]) -> None:
    w, token = seeded
    settings = w.settings(users=str(w.tmp / "users.toml"))
    expected = [f"bulk-{i:05}" for i in range(ROWS, 0, -1)]  # newest first
    assert ROWS % PAGE == 0
    with Client(settings=settings) as c, served(settings) as site, chromium() as browser:
        page = person(browser, site, token)
        arrived: list[str] = []
        for first, last in STRETCHES:
            if first == 1:
                page.goto(f"{site}/?queue=bulk")
            else:  # the cursor after the runs of the pages skipped, and of those that arrived since
                skip = (first - 1) * PAGE + len(arrived)
                after = page.request.get(f"{site}/api/runs?queue=bulk&limit={skip}").json()["next"]
                page.goto(f"{site}/?{urlencode({'queue': 'bulk', 'cursor': after})}")
            page.locator("#live-mode[data-mode]").wait_for(timeout=10_000)
            for n in range(first, last + 1):
                rows = shown(page)
                assert rows == expected[(n - 1) * PAGE : n * PAGE], f"page {n}: {rows[:2]}..{rows[-2:]}"
                if n in ARRIVE:  # runs arrive while someone pages
                    arrived += [c.enqueue("bulk", {"late": n}, queue="bulk").id for _ in range(3)]
                    queued = page.locator("#counts li.state-queued b", has_text=str(len(arrived)))
                    queued.wait_for(timeout=30_000)  # the list refreshed itself (a loaded machine: slow)...
                    assert shown(page) == rows  # ...and shows the same page, unshifted
                if n == ROWS // PAGE:
                    assert page.locator("#next-page").count() == 0  # the last page
                    break
                nxt = page.locator("#next-page").get_attribute("href")
                page.click("#next-page")
                page.wait_for_url(site + str(nxt))
        back = page.locator("#first-page").get_attribute("href")
        page.click("#first-page")
        page.wait_for_url(site + str(back))
        assert shown(page)[: len(arrived)] == list(reversed(arrived))  # the runs that arrived: first
        assert shown(page)[len(arrived) :] == expected[: PAGE - len(arrived)]
        assert page.errors == []
