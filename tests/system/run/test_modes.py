"""Demo mode or production, as `holdline run` decides it (libs/modes.py), on real processes.

With a tools file and no HOLDLINE_DEMO, only the file's tools are listed, admitted and
executed; the sandbox provider is never started, and the demo's fault panel is not served.
With HOLDLINE_DEMO=0 and no tools, `holdline run` refuses to start and says how to start the
demo. The file's tool has optional and nullable role-bearing arguments: it starts, and
admission enforces each role when a value is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path

import httpx
import pytest

from holdline.client import HoldlineClient, HoldlineError, ToolCall
from testkit.run import Running, holdline_run
from testkit.tools_file import tools_file

# One HTTP tool whose amount, resource list and owned value are optional (nullable too):
# a natural file, refused before roles saw through `int | None`.
OPTIONAL_ROLES = """
[[tools]]
name = "open_ticket"
description = "Open a ticket."
closing = "Ticket {result.id} is open."
max_amount = 1000
[tools.parameters]
type = "object"
required = ["project", "title"]
[tools.parameters.properties.project]
type = "string"
[tools.parameters.properties.title]
type = "string"
[tools.parameters.properties.budget]
type = "integer"
[tools.parameters.properties.watchers]
type = ["array", "null"]
items = { type = "string" }
[tools.parameters.properties.account]
anyOf = [{ type = "string" }, { type = "null" }]
[tools.roles]
project = "resource"
title = "text"
budget = "amount"
watchers = "resource"
account = "owned"
[tools.http]
execute = { url = "http://127.0.0.1:9/tickets", idempotency_header = "X-Request-Token" }
lookup = { url = "http://127.0.0.1:9/tickets/by-token/{idempotency_key}" }
"""

PRODUCTION_SERVICES = (
    "operation-worker", "batch-coordinator", "delivery-policy", "interaction-surface",
)


def _wait_ready(running: Running, names: tuple[str, ...], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    pending = set(names)
    while pending and time.monotonic() < deadline:
        assert running.proc.poll() is None, "\n".join(running.output.lines[-40:])
        for name in list(pending):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{running.url(name)}/readyz", timeout=1).status_code == 200:
                    pending.discard(name)
        time.sleep(0.2)
    assert not pending, f"not ready: {sorted(pending)}"


def _port_closed(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError), httpx.Client(timeout=0.5) as client:
        client.get(f"http://127.0.0.1:{port}/readyz")
        return False
    return True


async def test_production_serves_only_the_files_tools_and_no_sandbox(tmp_path: Path) -> None:
    path = tools_file(tmp_path, OPTIONAL_ROLES)
    env = {"HOLDLINE_DEMO": "", "HOLDLINE_TOOLS_FILE": str(path)}
    with holdline_run(tmp_path, env) as running:
        await asyncio.to_thread(_wait_ready, running, PRODUCTION_SERVICES)
        text = "\n".join(running.output.lines)
        assert "production mode: only your tools" in text
        # The sandbox provider was never started, and nothing answers on its port.
        assert not any("started sandbox-provider" in line for line in running.output.lines)
        assert _port_closed(running.ports["sandbox-provider"])
        async with HoldlineClient(running.url("interaction-surface")) as hl:
            user = f"u-{uuid.uuid4().hex[:8]}"
            s = await hl.create_session(user_id=user, tenant_id="acme")
            listed = await s.tools()
            assert [t["function"]["name"] for t in listed] == ["open_ticket"]
            # A demo tool is an unknown tool here, refused whole as problem+json.
            with pytest.raises(HoldlineError) as unknown:
                await s.tool_calls([ToolCall(tool_call_id="t1", name="transfer_money",
                                             arguments={"amount": 100})])
            assert unknown.value.status == 422
            assert "unknown tool 'transfer_money'" in unknown.value.detail
            base = {"project": "billing", "title": "Refund"}
            calls = [
                # Every optional role left out, or null: admitted.
                ("ok", base),
                ("nulls", {**base, "title": "Nulls", "watchers": None, "account": None}),
                # Given, each role is enforced.
                ("budget", {**base, "title": "Big", "budget": 5000}),
                ("watchers", {**base, "title": "W", "watchers": ["ops", "globex/ops"]}),
                ("account", {**base, "title": "A", "account": "bob:main"}),
                ("mine", {**base, "title": "Mine", "budget": 500, "watchers": ["acme/ops"],
                          "account": f"{user}:main"}),
            ]
            answer = await s.tool_calls(
                [ToolCall(tool_call_id=cid, name="open_ticket", arguments=args)
                 for cid, args in calls]
            )
            status = {r.tool_call_id: r.operations[0].status for r in answer.results}
            assert status["budget"] == "rejected"
            assert status["watchers"] == "rejected"
            assert status["account"] == "rejected"
            for admitted in ("ok", "nulls", "mine"):
                assert status[admitted] != "rejected", answer
            # The demo's fault panel is not served either.
            async with httpx.AsyncClient(base_url=running.url("interaction-surface")) as http:
                assert (await http.get("/v1/demo/faults")).status_code == 404
            # Chat turns need a configured model: a clear problem+json, not a silent failure.
            async with httpx.AsyncClient(base_url=running.url("interaction-surface")) as http:
                turn = await http.post(
                    f"/v1/sessions/{s.session_id}/turns", json={"text": "hello"},
                    headers={"Authorization": f"Bearer {s.token}"},
                )
            assert turn.status_code == 503, turn.text
            assert turn.headers["content-type"].startswith("application/problem+json")
            assert "HOLDLINE_MODEL" in turn.json()["detail"]


async def test_production_without_tools_refuses_and_says_how_to_start_the_demo(
    tmp_path: Path,
) -> None:
    with holdline_run(tmp_path, {"HOLDLINE_DEMO": "0"}) as running:
        code = await asyncio.to_thread(running.proc.wait, 60)
        running.output.join()
        text = "\n".join(running.output.lines)
    assert code == 78
    assert "refusing to start" in text
    assert "HOLDLINE_DEMO=1" in text
    assert "started" not in text  # refused before any child


async def test_a_tools_file_with_no_tools_refuses_in_production(tmp_path: Path) -> None:
    path = tools_file(tmp_path, "# nothing yet\n")
    with holdline_run(tmp_path, {"HOLDLINE_DEMO": "", "HOLDLINE_TOOLS_FILE": str(path)}) as running:
        code = await asyncio.to_thread(running.proc.wait, 90)
        running.output.join()
        text = "\n".join(running.output.lines)
    assert code == 78
    assert "no [[tools]] entries" in text
    assert "to start the demo instead" in text
    assert "HOLDLINE_DEMO=1" in text
