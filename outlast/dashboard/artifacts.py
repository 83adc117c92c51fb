"""This module serves one artifact to a person with the operator role.

The route is ``GET /api/runs/{run_id}/artifact?name=NAME[&op=OP]``. Where the payload store is an
object store (S3), the answer is a redirect to a presigned URL, good for ``SIGNED_FOR`` seconds
(the bytes never pass through the dashboard); in Postgres, the bytes themselves."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from outlast._payloads import key_of
from outlast.dashboard.web import DOWNLOAD, caller_of, client_of, status_of
from outlast.errors import OutlastError

SIGNED_FOR = 300


def _attachment(name: str) -> str:
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "_" for ch in name)
    return f'attachment; filename="{safe or "artifact"}"'


async def download(request: Request) -> Response:
    """One artifact's bytes (or a redirect to them), or why not."""
    run_id, name = request.path_params["run_id"], request.query_params.get("name", "")
    client = client_of(request)
    try:
        # an unknown run or artifact is a 404 for everyone (a viewer sees the run page's list)
        meta = await client.artifact_of(run_id, name, request.query_params.get("op") or None)
        why = request.app.state.gate.refusal(caller_of(request), *DOWNLOAD)
        if why is not None:
            return JSONResponse({"error": why}, status_code=403)
        objects = client.store.objects
        if objects is not None and hasattr(objects, "sign"):
            url = await objects.sign(key_of(run_id, meta["sha256"]), SIGNED_FOR)
            return RedirectResponse(url, status_code=307)
        data = await client.artifact(run_id, name, meta["op_id"])
    except OutlastError as exc:
        return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
    headers = {"Content-Disposition": _attachment(name)}
    return Response(data, media_type=meta["media_type"], headers=headers)
