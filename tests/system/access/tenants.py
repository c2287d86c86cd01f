"""The access suite's tenants, keys, limits and secrets, and the calls its tests make on them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from testkit.surface import Chat

# Every tenant the tests use has a key: without one, creating a session is refused.
TENANTS = ("acme", "globex", "burst-a", "burst-b", "calm", "scan")


API_KEYS = {tenant: f"key-{tenant}-{uuid.uuid4().hex}" for tenant in TENANTS}


TOKEN_TTL_S = 2.0


# Burst/refill per second: a session may write 8 times at once, a tenant 30.
RATE_SESSION = (8, 1)


RATE_TENANT = (30, 1)


SECRETS = {
    "TWILIO_AUTH_TOKEN": f"twilio-{uuid.uuid4().hex}",
    "HOLDLINE_CALLBACK_SECRET": f"callback-{uuid.uuid4().hex}",
}


# Tenant-signed JWTs (HS256 here, so the test can sign them).
JWT_SECRET = f"jwt-{uuid.uuid4().hex}{uuid.uuid4().hex}"
JWT = {
    "HOLDLINE_JWT_KEY": JWT_SECRET,
    "HOLDLINE_JWT_ALGORITHMS": "HS256",
    "HOLDLINE_JWT_ISSUER": "https://idp.test",
    "HOLDLINE_JWT_AUDIENCE": "holdline",
}


def _keys() -> str:
    return ",".join(f"{tenant}:{key}" for tenant, key in API_KEYS.items())


async def open_session(client: httpx.AsyncClient, tenant: str = "acme", **extra: Any) -> Chat:
    """A session of the tenant, created with the tenant's API key."""
    response = await client.post(
        "/v1/sessions",
        json={"user_id": f"u-{uuid.uuid4().hex[:8]}", "tenant_id": tenant, **extra},
        headers={"X-Api-Key": API_KEYS[tenant]},
    )
    assert response.status_code == 201, response.text
    data = response.json()
    return Chat(client, data["session_id"], data["token"], data["agent"])


def assert_problem(response: httpx.Response, status: int, slug: str | None = None) -> None:
    """An RFC 9457 answer with the status (and problem type, when given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status
    if slug is not None:
        assert body["type"].endswith(f"/{slug}"), body


async def ws_status(url: str) -> int:
    """The HTTP status a WebSocket upgrade gets (101 when it opens)."""
    try:
        async with connect(url):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


def call_text(tool: str, arguments: dict[str, Any]) -> str:
    """What makes the `literal` model propose exactly this tool call."""
    return f"call {tool} {json.dumps(arguments)}"
