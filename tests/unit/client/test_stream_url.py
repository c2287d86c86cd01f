"""The agent stream's URL carries no session token: it goes in the Authorization header
(a URL ends up in logs, and a surface refuses a URL token from a caller that is not local)."""

from __future__ import annotations

from holdline.client.http import HoldlineClient, SessionClient
from holdline.client.stream import AgentStream


async def test_the_agent_stream_url_has_no_token() -> None:
    async with HoldlineClient("https://holdline.example.com") as client:
        session = SessionClient(client, "s1", "secret-token", None)
        fresh = AgentStream(session)
        assert fresh._url() == "wss://holdline.example.com/v1/sessions/s1/agent"
        resumed = AgentStream(session, after=7)
        assert resumed._url() == "wss://holdline.example.com/v1/sessions/s1/agent?after=7"
        assert "secret-token" not in fresh._url() + resumed._url()
