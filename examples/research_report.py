"""Research report: gather sources, draft, store the artifact, wait for approval, publish it once.

The uncertain-publish protocol of seed 003, as outlast runs ``publish``:

1. intention: the operation id, the artifact's key and hash and the destination are journaled
   before anything leaves the worker (the approval was given for exactly these arguments);
2. send: ``publish`` names the artifact by its stable key and hash, so the service can be asked;
3. result: the publication id is journaled before the workflow goes on;
4. gap: a worker that takes the run over with an intention and no result asks the service (the
   reconciler) whether this artifact, by key AND hash, is published: yes → that result is
   journaled and nothing is published again; ``NOT_EXECUTED`` → it is published now;
5. unsure: the reconciler raises; the operation is in doubt and the run waits for a person
   (``outlast status RUN``, then ``outlast resolve RUN OP --executed`` or ``--not-executed``).

From the repository root (no OUTLAST_*_URL set: the embedded default in .outlast/):
``python -m examples.research_report`` starts a worker, runs one report, approves it and prints
the result. By hand: ``outlast worker examples.research_report:app``, ``outlast enqueue
research_report --input '{"topic": "tides"}'``, ``outlast approve RUN op-4 --as editor --comment
"Sources checked." --yes-i-saw`` (shows the action and asks; or ``--args-hash H`` from ``outlast
status RUN``). Tables: schema ``<OUTLAST_SCHEMA>_reports``. ``REPORT_LOOKUP_DOWN=1`` on a
worker makes the service's lookup fail (step 5).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any

import psycopg

from examples import own_tables
from outlast import NOT_EXECUTED, Action, App, Run

app = App()

_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.artifacts (
    key text PRIMARY KEY, sha256 text NOT NULL, body text NOT NULL, at timestamptz DEFAULT now());
CREATE TABLE IF NOT EXISTS {s}.published (  -- the publication service: no unique key of its own
    id serial PRIMARY KEY, key text NOT NULL, sha256 text NOT NULL, destination text NOT NULL,
    url text NOT NULL, at timestamptz DEFAULT now());
"""


def tables_schema(outlast_schema: str) -> str:
    return f"{outlast_schema}_reports"


@functools.cache
def _where() -> tuple[str, str]:
    """The example's tables: in outlast's Postgres, in a schema beside the one the worker serves."""
    return own_tables(tables_schema, _TABLES)


def query(statement: str, *params: Any) -> tuple[Any, ...] | None:
    url, schema = _where()
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        cur = conn.execute(statement.encode(), params)
        return cur.fetchone() if cur.description else None


@app.tool("gather_sources", effect="read")
def gather_sources(topic: str) -> list[dict[str, str]]:
    """A search: no side effect, redone freely after a crash."""
    return [
        {"title": f"{topic}: a survey", "url": "https://example.org/survey"},
        {"title": f"{topic} in production", "url": "https://example.org/field-notes"},
    ]


@app.tool("draft_report", effect="read")
def draft_report(topic: str, sources: list[dict[str, str]]) -> str:
    """The model writes the report (simulated). Its journaled result is what gets stored."""
    cited = "\n".join(f"- [{s['title']}]({s['url']})" for s in sources)
    return f"# {topic.capitalize()}\n\nWhat {len(sources)} sources say about {topic}.\n\n{cited}\n"


@app.tool("store_artifact", idempotent=True)
def store_artifact(key: str, body: str) -> dict[str, str]:
    """Store the report under a stable key; the key is bound to its content hash for good."""
    sha = hashlib.sha256(body.encode()).hexdigest()
    query(
        "INSERT INTO artifacts (key, sha256, body) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", key, sha, body
    )
    stored = query("SELECT sha256 FROM artifacts WHERE key = %s", key)
    if stored is None or stored[0] != sha:
        raise ValueError(f"artifact {key} already holds other content; a new report needs a new key")
    return {"key": key, "sha256": sha}


@app.tool("publish")
def publish(key: str, sha256: str, destination: str) -> dict[str, Any]:
    """A plain side effect: the service may publish and the answer be lost. It checks the stored
    file against the approved hash first."""
    row = query("SELECT body FROM artifacts WHERE key = %s", key)
    if row is None or hashlib.sha256(row[0].encode()).hexdigest() != sha256:
        raise ValueError(f"artifact {key} is missing or not the approved one ({sha256[:12]})")
    url = f"https://reports.example.org/{destination}/{key}"
    new = "INSERT INTO published (key, sha256, destination, url) VALUES (%s, %s, %s, %s) RETURNING id"
    published = query(new, key, sha256, destination, url)
    assert published is not None
    return {"publication": published[0], "url": url}


@app.reconciler("publish")
def find_publication(args: dict[str, Any], action: Action) -> Any:
    """Step 4: ask the service whether this artifact (key AND hash) is published. Step 5: if it
    cannot tell, raise; never guess."""
    if os.environ.get("REPORT_LOOKUP_DOWN"):
        raise ConnectionError("the publication service's lookup does not answer")
    found = query(
        "SELECT id, url FROM published WHERE key = %s AND sha256 = %s AND destination = %s ORDER BY id",
        args["key"],
        args["sha256"],
        args["destination"],
    )
    return {"publication": found[0], "url": found[1]} if found else NOT_EXECUTED


@app.workflow("research_report", version="1")
async def research_report(run: Run, topic: str, destination: str = "blog") -> dict[str, Any]:
    sources = await run.call("gather_sources", topic=topic)
    text = await run.call("draft_report", topic=topic, sources=sources)
    artifact = await run.call("store_artifact", key=f"reports/{run.run_id}.md", body=text)
    action = {**artifact, "destination": destination}
    decision = await run.approval("publish", action, approvers=["editor"], expires_in=7 * 86400)
    if not decision.approved:  # revised: acting on other arguments needs an approval of its own
        return {"published": False, "revised": decision.args}
    return {"published": True, **action, **await run.call("publish", **action)}


def main() -> None:
    from examples import local_worker, pending_approval

    with local_worker("examples.research_report:app") as client:
        run = client.enqueue("research_report", {"topic": "durable execution"})
        print(f"run {run.id} enqueued: gather sources, draft, store")
        ask = pending_approval(client, run.id)
        print(f"run {run.id} awaits approval {ask['op_id']} of {ask['action']} {json.dumps(ask['args'])}")
        client.approve(
            run.id, ask["op_id"], approver="editor", comment="Sources checked.", args_hash=ask["args_hash"]
        )
        print("approved by editor")
        done = client.wait(run.id, timeout=60)
        print(f"run {run.id} {done.state}: {json.dumps(done.result or done.error, indent=2)}")


if __name__ == "__main__":
    main()
