"""The HTTP half of the client: sessions, tools, tool calls, signals, pending updates, acks."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
import msgspec

from ._closing import AsyncClosing
from .frames import lenient
from .models import (
    AckResult,
    AckStatus,
    HoldlineError,
    PendingUpdates,
    ToolCall,
    ToolCallsResponse,
    ToolFormat,
    ack_body,
    signal_body,
)
from .stream import AgentStream

T = TypeVar("T")


def _error(response: httpx.Response) -> HoldlineError:
    """The problem+json body as an exception (a plain status when the body is not one)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return HoldlineError(response.status_code, "about:blank", response.reason_phrase)
    return HoldlineError(
        int(body.get("status", response.status_code)),
        str(body.get("type", "about:blank")),
        str(body.get("title", response.reason_phrase)),
        str(body.get("detail", "")),
    )


class HoldlineClient(AsyncClosing):
    """An async client for one holdline interaction surface (`async with` closes it)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8080",
        api_key: str | None = None,
        timeout_s: float = 10.0,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"X-Api-Key": api_key} if api_key else {}
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_s, headers=headers, transport=transport
        )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._http.aclose()

    async def create_session(
        self, user_id: str, tenant_id: str | None = None, agent: str | None = None
    ) -> SessionClient:
        """`POST /v1/sessions`: a new session and its token."""
        body: dict[str, Any] = {"user_id": user_id}
        if tenant_id is not None:
            body["tenant_id"] = tenant_id
        if agent is not None:
            body["agent"] = agent
        data = await self.request("POST", "/v1/sessions", json=body, expect=201)
        return SessionClient(self, data["session_id"], data["token"], data["agent"])

    def session(self, session_id: str, token: str, agent: str | None = None) -> SessionClient:
        """A handle on an existing session (no request is made)."""
        return SessionClient(self, session_id, token, agent)

    async def request(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        json: Any = None,
        params: dict[str, str] | None = None,
        expect: int = 200,
    ) -> Any:
        """One request; the decoded JSON body (None for 204), or HoldlineError."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if json is not None:
            headers["content-type"] = "application/json"
        response = await self._http.request(
            method,
            path,
            content=msgspec.json.encode(json) if json is not None else None,
            headers=headers,
            params=params,
        )
        if response.status_code != expect:
            raise _error(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()


class SessionClient:
    """One session of the Agent API, authenticated with its bearer token."""

    def __init__(
        self, client: HoldlineClient, session_id: str, token: str, agent: str | None
    ) -> None:
        self.client = client
        self.session_id = session_id
        self.token = token
        self.agent = agent

    def _path(self, tail: str = "") -> str:
        return f"/v1/sessions/{self.session_id}{tail}"

    async def _call(self, method: str, tail: str, kind: type[T], **options: Any) -> T:
        data = await self.client.request(method, self._path(tail), token=self.token, **options)
        return lenient(data, kind, strict=True)

    async def tools(self, format: ToolFormat = "openai") -> list[dict[str, Any]]:
        """The active agent's tools as function definitions for a model SDK."""
        data = await self.client.request(
            "GET", self._path("/tools"), token=self.token, params={"format": format}
        )
        tools: list[dict[str, Any]] = data["tools"]
        return tools

    async def tool_calls(
        self,
        calls: list[ToolCall],
        turn_id: str | None = None,
        response_id: str | None = None,
        user_text: str | None = None,
    ) -> ToolCallsResponse:
        """Admit one batch of the model's calls; returns on acceptance, never on completion."""
        extra = {"turn_id": turn_id, "response_id": response_id, "user_text": user_text}
        body: dict[str, Any] = {
            "calls": [msgspec.to_builtins(c) for c in calls],
            **{k: v for k, v in extra.items() if v is not None},
        }
        return await self._call("POST", "/tool-calls", ToolCallsResponse, json=body)

    async def signal(
        self, user_speaking: bool | None = None, agent_speaking: bool | None = None
    ) -> None:
        """Report the conversation's clocks: is the user talking, is the agent playing audio."""
        body = signal_body(user_speaking, agent_speaking)
        await self.client.request(
            "POST", self._path("/signals"), token=self.token, json=body, expect=204
        )

    async def pending(self) -> PendingUpdates:
        """Updates that found no proactive window, and the context text for the next call."""
        return await self._call("GET", "/pending", PendingUpdates)

    async def ack(
        self,
        delivery_id: str,
        status: AckStatus,
        heard_text: str | None = None,
        turn_id: str | None = None,
    ) -> AckResult:
        """Acknowledge a delivery over HTTP (the same acknowledgement as on the stream)."""
        return await self._call(
            "POST",
            f"/deliveries/{delivery_id}/ack",
            AckResult,
            json=ack_body(status, heard_text, turn_id),
        )

    async def snapshot(self) -> dict[str, Any]:
        """`GET /v1/sessions/{id}`: messages, operations, batches, deliveries."""
        data: dict[str, Any] = await self.client.request("GET", self._path(), token=self.token)
        return data

    async def timeline(self) -> dict[str, Any]:
        """`GET /v1/sessions/{id}/timeline`: the session's events in causal order."""
        data: dict[str, Any] = await self.client.request(
            "GET", self._path("/timeline"), token=self.token
        )
        return data

    async def handoff(self, agent: str) -> dict[str, Any]:
        """Hand the session to another agent (its tool list changes with it)."""
        data: dict[str, Any] = await self.client.request(
            "POST", self._path("/handoff"), token=self.token, json={"agent": agent}
        )
        self.agent = agent
        return data

    def agent_stream(self, after: int | None = None, **options: Any) -> AgentStream:
        """The agent channel (`WS /v1/sessions/{id}/agent`), reconnecting by itself."""
        return AgentStream(self, after=after, **options)
