"""The operators' pages show schedules (pause, resume, trigger) and the fleet (workers, queues, dead
letters requeued)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from outlast import _fleet as fleet
from outlast.dashboard import acts, views, web
from outlast.dashboard.render import render
from outlast.errors import OutlastError


async def schedules_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    rows = await web.client_of(request).schedules()
    return render(request, "schedules.html", status, schedules=rows, message=message)


async def schedule(request: Request) -> Response:
    """Pause, resume or trigger a schedule (operators), from its form."""
    why = request.app.state.gate.refusal(web.caller_of(request), *web.SCHEDULE)
    if why is not None:
        return await schedules_page(request, f"refused: {why}", 403)
    if await web.form_of(request) is None:
        return await schedules_page(request, web.STALE, 403)
    c, p = web.client_of(request), request.path_params
    try:
        said = await acts.schedule_act(c, web.caller_of(request).principal, p["name"], p["act"])
    except web.Refusal as exc:
        return await schedules_page(request, f"refused: {exc}", exc.status)
    except OutlastError as exc:
        return await schedules_page(request, f"refused: {exc}", web.status_of(exc))
    return await schedules_page(request, said)


async def fleet_page(request: Request, message: str | None = None, status: int = 200) -> Response:
    view = await views.fleet_view(web.client_of(request))
    return render(request, "fleet.html", status, f=view, message=message)


async def requeue(request: Request) -> Response:
    why = request.app.state.gate.refusal(web.caller_of(request), *web.REQUEUE)
    if why is not None:
        return await fleet_page(request, f"refused: {why}", 403)
    form = await web.form_of(request)
    if form is None:
        return await fleet_page(request, web.STALE, 403)
    c, queue, entry = web.client_of(request), str(form.get("queue", "")), str(form.get("entry", ""))
    letters = await c.dead_letters(queue, count=1, entry_id=entry) if fleet.is_entry_id(entry) else []
    if not letters:
        return await fleet_page(request, f"no dead letter {entry} on queue '{queue}'", 404)
    _, message = await c.requeue_dead_letter(queue, letters[0])
    return await fleet_page(request, message)
