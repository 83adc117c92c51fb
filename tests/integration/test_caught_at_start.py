"""Mistakes a worker refuses at start, each in one line through the real CLI, before any run is
taken: a reconciler of no tool (a typo that would leave the tool's interrupted calls in doubt),
callbacks without OUTLAST_SECRET_KEY, an OUTLAST_CALLBACK_URL that is not absolute; and a worker
whose workflows make callbacks with no OUTLAST_CALLBACK_URL says so."""

from __future__ import annotations

from tests.conftest import World, wait_for

CHAT = "tests.apps.chat:app"


def _refused(world: World, app: str, **env: str) -> str:
    done = world.cli("worker", app, **env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_a_reconciler_of_no_tool_is_refused_saying_which(world: World) -> None:
    line = _refused(world, "tests.apps.typos:app")
    assert line.startswith("outlast: error: @app.reconciler('emial_receipt') names no tool of this app")
    assert "did you mean 'email_receipt'?" in line


def test_callbacks_without_a_secret_key_are_refused(world: World) -> None:
    line = _refused(world, CHAT, OUTLAST_SECRET_KEY="")
    assert line.startswith("outlast: error: workflows ") and "make callbacks" in line
    assert "OUTLAST_SECRET_KEY is not set" in line


def test_a_relative_callback_url_is_refused(world: World) -> None:
    line = _refused(world, CHAT, OUTLAST_CALLBACK_URL="/callbacks")
    assert "OUTLAST_CALLBACK_URL='/callbacks' is not an absolute http(s) URL" in line


def test_callbacks_with_no_url_are_said_at_start(world: World) -> None:
    world.worker(CHAT)
    found = wait_for(lambda: world.logged("worker.callbacks_relative"), what="the warning")
    assert "pay" in found[0]["workflows"] or found[0]["workflows"], found
    world.stop_all()
    world.worker(CHAT, OUTLAST_CALLBACK_URL="https://example.com/callbacks")
    wait_for(lambda: world.logged("worker.started"), what="the worker's start")
    assert len(world.logged("worker.callbacks_relative")) == 1


def test_an_app_whose_registration_is_refused_stops_the_worker_in_one_line(world: World) -> None:
    line = _refused(world, "tests.apps.bad_effect:app")
    assert line.startswith("outlast: error: the app module 'tests.apps.bad_effect' does not load: ")
    assert "effect='reed' is not one of write, read (did you mean 'read'?)" in line
    assert "tests/apps/bad_effect.py:10)" in line
