"""A first outlast app: a workflow that calls one tool and reads the clock, both journaled."""

from outlast import App, Client, Run, current_action

app = App()


@app.tool("greet")
def greet(name: str) -> str:
    key = current_action().idempotency_key  # the same on every resume of this run
    return f"hello, {name} (operation {key})"


@app.workflow("hello")
async def hello(run: Run, name: str) -> dict[str, str]:
    greeting = await run.call(greet, name=name)  # journaled before and after
    return {"greeting": greeting, "at": (await run.now()).isoformat()}


if __name__ == "__main__":
    with Client.from_env(app=app) as client:
        run = client.enqueue("hello", {"name": "ada"})
        print(client.wait(run.id, timeout=60).result)
