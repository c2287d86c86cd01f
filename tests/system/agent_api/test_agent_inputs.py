"""Bad input to the Agent API: a clear problem+json or error frame, nothing partial stored,
and other sessions keep flowing."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from holdline.client import HoldlineClient, HoldlineError, SessionClient, ToolCall
from testkit.surface import SurfaceStack, unique

from .sessions import DAY, events, session

GOOD = {"tool_call_id": "ok1", "name": "provision_access", "arguments": {"accesses": ["github"]}}


async def post(stack: SurfaceStack, s: SessionClient, tail: str, body: Any) -> httpx.Response:
    """A raw POST (the client would refuse to build some of these bodies)."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with httpx.AsyncClient(base_url=stack.url) as http:
        return await http.post(
            f"/v1/sessions/{s.session_id}{tail}",
            content=content,
            headers={"Authorization": f"Bearer {s.token}", "content-type": "application/json"},
        )


def refused(response: httpx.Response, status: int, words: str) -> None:
    """A problem+json answer with that status, naming the reason."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert words in response.json()["detail"], response.json()


@pytest.mark.parametrize(
    ("call", "words"),
    [
        ({"tool_call_id": "x", "name": "launch_rocket", "arguments": {}}, "unknown tool"),
        ({"tool_call_id": "x", "name": "revoke_access", "arguments": {}}, "unknown tool"),
        ({"tool_call_id": "x", "name": "provision_access", "arguments": "{not json"},
         "not JSON"),
        ({"tool_call_id": "x", "name": "provision_access", "arguments": "[1, 2]"},
         "JSON object"),
        ({"tool_call_id": "x", "name": "provision_access", "arguments": {"accesses": "github"}},
         "must be a list"),
        ({"tool_call_id": "x", "name": "book_table",
          "arguments": {"restaurant": "nobu", "date": DAY}}, "time"),
        ({"tool_call_id": "x", "name": "book_table",
          "arguments": {"restaurant": "nobu", "date": DAY, "time": "21:00", "party_size": "2"}},
         "party_size"),
        ({"tool_call_id": "é" * 129, "name": "provision_access",
          "arguments": {"accesses": ["github"]}}, "256 bytes"),
        ({"tool_call_id": "x", "name": "confirm_operation", "arguments": {"operation_id": "op"}},
         "confirmed"),
    ],
)
async def test_bad_calls_are_refused_whole(
    hl: HoldlineClient, stack: SurfaceStack, call: dict[str, Any], words: str
) -> None:
    s = await session(hl)
    response = await post(stack, s, "/tool-calls", {"calls": [GOOD, call]})
    refused(response, 422, words)
    # Nothing of the request is stored, the good call included, and its id stays free.
    snap = await s.snapshot()
    assert snap["operations"] == []
    assert snap["batches"] == []
    assert await events(s, "tool_calls.received") == []
    again = await s.tool_calls([ToolCall(**GOOD)])
    assert again.results[0].operations[0].status in {"admitted", "running"}


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"{", 400),
        (b"", 400),
        ({"calls": []}, 422),
        ({"calls": "c1"}, 422),
        ({"calls": [GOOD], "extra": 1}, 422),
        ({"calls": [GOOD, GOOD]}, 422),
        ({"calls": [{"name": "provision_access"}]}, 422),
        ({"calls": [GOOD], "turn_id": "has spaces"}, 422),
    ],
)
async def test_malformed_tool_call_requests(
    hl: HoldlineClient, stack: SurfaceStack, body: Any, status: int
) -> None:
    s = await session(hl)
    response = await post(stack, s, "/tool-calls", body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert (await s.snapshot())["operations"] == []


@pytest.mark.parametrize(
    "body", [{"user_speaking": "yes"}, {}, {"typing": True}, {"agent_speaking": 1}, [True]]
)
async def test_bad_signals(hl: HoldlineClient, stack: SurfaceStack, body: Any) -> None:
    s = await session(hl)
    response = await post(stack, s, "/signals", body)
    assert response.status_code == 422, response.text
    assert await events(s, "speech.started") == []


async def test_tools_need_a_known_format_and_the_token(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    with pytest.raises(HoldlineError) as bad:
        await s.tools("xml")  # type: ignore[arg-type]
    assert bad.value.status == 422
    with pytest.raises(HoldlineError) as stranger:
        await hl.session(s.session_id, "not-the-token").tools()
    assert stranger.value.status == 404
    schemas = await s.tools("json-schema")
    assert all(set(t) == {"name", "description", "parameters"} for t in schemas)


async def test_acks_out_of_order_and_of_other_sessions(hl: HoldlineClient) -> None:
    s, other = await session(hl), await session(hl)
    async with s.agent_stream() as stream:
        await s.tool_calls(
            [ToolCall(tool_call_id="a1", name="provision_access",
                      arguments={"accesses": [unique("jira")]})]
        )
        say = await stream.next(30)
        with pytest.raises(HoldlineError) as foreign:
            await other.ack(say.delivery_id, "spoken")
        assert foreign.value.status == 404
        with pytest.raises(HoldlineError) as missing:
            await stream.ack("dlv-does-not-exist", "spoken")
        assert (missing.value.status, missing.value.type) == (404, "unknown_delivery")
        with pytest.raises(HoldlineError) as stray:
            await s.ack(say.delivery_id, "spoken", heard_text="all")
        assert stray.value.status == 422
        # `spoken` before `started` is fine; a second `spoken` and a late `started` are no-ops.
        first = await stream.ack(say.delivery_id, "spoken")
        assert first.delivery_status == "spoken"
        assert (await stream.ack(say.delivery_id, "spoken")).delivery_status == "spoken"
        assert (await s.ack(say.delivery_id, "started")).delivery_status == "spoken"
        with pytest.raises(HoldlineError) as late:
            await stream.ack(say.delivery_id, "unheard", heard_text="All")
        assert (late.value.status, late.value.type) == (409, "already_said")
    assert len(await events(s, "delivery.spoken")) == 1
    assert len(await events(s, "turn.replied")) == 1
    assert await events(other, "delivery.spoken") == []


async def test_bad_frames_get_error_frames_and_the_channel_keeps_working(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    base = stack.url.replace("http://", "ws://")
    url = f"{base}/v1/sessions/{s.session_id}/agent?token={s.token}"
    with pytest.raises(InvalidStatus) as wrong_token:
        async with connect(f"{base}/v1/sessions/{s.session_id}/agent?token=nope"):
            pass
    assert wrong_token.value.response.status_code == 404
    with pytest.raises(InvalidStatus) as bad_after:
        async with connect(f"{url}&after=soon"):
            pass
    assert bad_after.value.response.status_code == 400
    async with connect(url) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        for raw, code in (
            ("{nope", "malformed_json"),
            (json.dumps({"type": "dance"}), "invalid_frame"),
            (json.dumps({"type": "signal", "user_speaking": "loud"}), "invalid_frame"),
            (json.dumps({"type": "signal"}), "invalid_frame"),
            (json.dumps({"type": "delivery.ack", "delivery_id": "d", "status": "heard"}),
             "invalid_frame"),
            (json.dumps({"type": "delivery.ack", "delivery_id": "dlv-x", "status": "spoken"}),
             "unknown_delivery"),
        ):
            await ws.send(raw)
            frame = json.loads(await ws.recv())
            assert (frame["type"], frame["code"]) == ("error", code), frame
        await ws.send(b"\x00binary")
        assert json.loads(await ws.recv())["code"] == "binary_frame"
        await ws.send(json.dumps({"type": "signal", "user_speaking": True}))
        await ws.send(json.dumps({"type": "signal", "user_speaking": False}))
        # Another session keeps flowing meanwhile, and this channel still works.
        other = await session(hl)
        answer = await other.tool_calls(
            [ToolCall(tool_call_id="o1", name="provision_access",
                      arguments={"accesses": [unique("okta")]})]
        )
        assert answer.batch_id
        await s.tool_calls(
            [ToolCall(tool_call_id="w1", name="provision_access",
                      arguments={"accesses": [unique("wiki")]})]
        )
        say = json.loads(await ws.recv())
        assert say["type"] == "delivery.say"
    assert len(await events(s, "speech.started")) == 1
    assert len(await events(s, "speech.stopped")) == 1


async def test_the_client_does_not_retry_a_refused_stream(hl: HoldlineClient) -> None:
    s = await session(hl)
    with pytest.raises(HoldlineError) as refused:
        async with hl.session(s.session_id, "not-the-token").agent_stream():
            pass
    assert refused.value.status == 404
    assert await events(s, "channel.connected") == []
