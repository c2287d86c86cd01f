"""HTTP tools from a file, hardened: fields never choose the host, dot segments and slashes
never reach the path, answers are capped, each exchange has a total deadline, and declared
headers carry credentials from the environment (a real aiohttp server on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from libs.tools import DeclarationError, ToolRegistry, identity_headers
from libs.tools.executor import OperationCall
from libs.tools.http import HttpExecutor
from libs.tools.http_file import load_tools_file
from libs.tools.wire import AiohttpClient

_ENTRY = """
[[tools]]
name = "refund"
description = "Refund an order."
open = true
[tools.parameters]
type = "object"
required = ["order_id"]
[tools.parameters.properties.order_id]
type = "string"
[tools.http]
execute = {{ method = "POST", url = "{execute}", idempotency_header = "X-Request-Token" }}
lookup = {{ url = "{base}/by-token/{{idempotency_key}}" }}
{extra}
"""


class Api:
    """The system of record: every request it received, in order."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs, dict(request.headers)))
        if request.path.startswith("/big"):
            answer = web.StreamResponse()  # chunked: no length declared up front
            await answer.prepare(request)
            chunk = b"x" * (64 * 1024)
            for _ in range(160):  # 10 MiB
                await answer.write(chunk)
            return answer
        if request.path.startswith("/drip"):
            answer = web.StreamResponse()
            await answer.prepare(request)
            for _ in range(40):  # each read is quick; the whole answer is not
                await answer.write(b" ")
                await asyncio.sleep(0.1)
            return answer
        return web.json_response({"id": "R-1"}, status=201)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    state = Api()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


@pytest.fixture
async def client() -> AsyncIterator[AiohttpClient]:
    http = AiohttpClient()
    yield http
    await http.aclose()


def _load(tmp_path: Path, client: AiohttpClient | None, execute: str, base: str, extra: str = ""
          ) -> HttpExecutor:
    path = tmp_path / "tools.toml"
    path.write_text(_ENTRY.format(execute=execute, base=base, extra=extra))
    registry = ToolRegistry()
    load_tools_file(str(path), registry, client)
    executor = registry.executor_for("refund") if client is not None else None
    assert executor is None or isinstance(executor, HttpExecutor)
    return executor  # type: ignore[return-value]


def _call(order_id: str) -> OperationCall:
    return OperationCall(
        operation_id="op1", session_id="s1", tool="refund", arguments={"order_id": order_id},
        tenant_id="acme", user_id="ana", idempotency_key="op1", reference="s1/op1",
    )


@pytest.mark.parametrize("value", ["..", ".", "a/../../admin", "a/b"])
async def test_a_dot_segment_or_a_slash_in_a_path_field_is_refused_before_sending(
    tmp_path: Path, api: Api, client: AiohttpClient, value: str
) -> None:
    executor = _load(tmp_path, client, f"{api.url}/orders/{{order_id}}/refund", api.url)
    result = await executor.execute(_call(value), timeout_s=2)
    assert result.outcome == "business_error"
    assert "{order_id}" in result.detail
    assert value not in result.detail.replace("{order_id}", "")
    assert api.requests == []
    # A plain value goes through, percent-encoded.
    assert (await executor.execute(_call("ana:1001"), timeout_s=2)).outcome == "success"
    assert [p for _, p, _ in api.requests] == ["/orders/ana:1001/refund"]


@pytest.mark.parametrize(
    "url", ["http://{order_id}/refund", "http://api.{order_id}.example/x", "https://h:{order_id}/"]
)
def test_a_field_in_the_host_is_refused_at_load(tmp_path: Path, url: str) -> None:
    with pytest.raises(DeclarationError) as refused:
        _load(tmp_path, None, url, "http://127.0.0.1:9")
    message = str(refused.value)
    assert str(tmp_path / "tools.toml") in message
    assert "tools[0] ('refund'): http.execute.url" in message
    assert "{order_id}" in message


async def test_a_ten_megabyte_answer_is_cut_and_fails_the_attempt(
    tmp_path: Path, api: Api, client: AiohttpClient
) -> None:
    executor = _load(tmp_path, client, f"{api.url}/big", api.url)
    result = await executor.execute(_call("ana:1"), timeout_s=5)
    assert result.outcome == "business_error"
    assert "max_response_bytes" in result.detail
    assert str(1 << 20) in result.detail


async def test_the_cap_is_declared_per_tool(
    tmp_path: Path, api: Api, client: AiohttpClient
) -> None:
    executor = _load(tmp_path, client, f"{api.url}/ok", api.url, "max_response_bytes = 4")
    result = await executor.execute(_call("ana:1"), timeout_s=5)
    assert (result.outcome, "max_response_bytes (4)" in result.detail) == ("business_error", True)


async def test_a_dripping_answer_is_cut_at_the_attempt_deadline(
    tmp_path: Path, api: Api, client: AiohttpClient
) -> None:
    executor = _load(tmp_path, client, f"{api.url}/drip", api.url)
    started = asyncio.get_running_loop().time()
    result = await executor.execute(_call("ana:1"), timeout_s=0.5)
    assert result.outcome == "timeout_after_send"
    assert asyncio.get_running_loop().time() - started < 2.0


async def test_declared_headers_carry_environment_values_and_are_never_echoed(
    tmp_path: Path, api: Api, client: AiohttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESK_TOKEN", "tok-5ecret")
    extra = '[tools.http.headers]\nAuthorization = "Bearer ${DESK_TOKEN}"\nX-Tenant = "acme"'
    executor = _load(tmp_path, client, f"{api.url}/orders/{{order_id}}", api.url, extra)
    assert (await executor.execute(_call("ana:1"), timeout_s=2)).outcome == "success"
    sent: dict[str, Any] = api.requests[0][2]
    assert sent["Authorization"] == "Bearer tok-5ecret"
    assert sent["X-Tenant"] == "acme"
    assert sent["X-Request-Token"] == "op1"
    # A transport failure names the endpoint's template, not the filled-in URL.
    gone = _load(tmp_path, client, "http://127.0.0.1:9/orders/{order_id}", api.url, extra)
    failed = await gone.execute(_call("ana:secret-order"), timeout_s=2)
    assert failed.outcome == "connect_error"
    assert "secret-order" not in failed.detail
    assert "tok-5ecret" not in failed.detail
    assert "{order_id}" in failed.detail


async def test_the_tenant_and_user_go_as_signed_headers_and_fill_templates(
    tmp_path: Path, api: Api, client: AiohttpClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESK_SIGNING", "sign-5ecret")
    url = f"{api.url}/tenants/{{holdline.tenant}}/orders/{{order_id}}?by={{holdline.user}}"
    executor = _load(tmp_path, client, url, api.url, 'identity_secret_env = "DESK_SIGNING"')
    assert (await executor.execute(_call("o-1"), timeout_s=2)).outcome == "success"
    _method, path, sent = api.requests[0]
    assert path == "/tenants/acme/orders/o-1?by=ana"
    assert (sent[identity_headers.TENANT], sent[identity_headers.USER]) == ("acme", "ana")
    now = time.time()
    assert identity_headers.verify(sent, secret=b"sign-5ecret", now=now) == ("acme", "ana")
    # Another key, a changed user or an old stamp does not verify.
    assert identity_headers.verify(sent, secret=b"other", now=now) is None
    assert identity_headers.verify(
        {**sent, identity_headers.USER: "bob"}, secret=b"sign-5ecret", now=now
    ) is None
    assert identity_headers.verify(sent, secret=b"sign-5ecret", now=now + 3600) is None
    # Without a secret the headers still name the session's tenant and user, unsigned; a
    # secret variable that is not set stops the declaration.
    plain = _load(tmp_path, client, f"{api.url}/orders/{{order_id}}", api.url)
    assert (await plain.execute(_call("o-2"), timeout_s=2)).outcome == "success"
    assert api.requests[1][2][identity_headers.USER] == "ana"
    assert identity_headers.SIGNATURE not in api.requests[1][2]
    monkeypatch.delenv("DESK_SIGNING")
    with pytest.raises(DeclarationError, match="DESK_SIGNING"):
        _load(tmp_path, None, url, api.url, 'identity_secret_env = "DESK_SIGNING"')
