"""Who may open a session, and with which agent, over HTTP.

"Off loopback" is a request carrying a forwarding header: the surface then treats it as a
remote caller (the voice edge's `is_local` rule), the same as one from another machine.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import jwt

from .tenants import API_KEYS, JWT, JWT_SECRET, assert_problem, open_session

REMOTE = {"X-Forwarded-For": "203.0.113.9"}


def _jwt(claims: dict[str, Any], secret: str = JWT_SECRET) -> str:
    base = {
        "iss": JWT["HOLDLINE_JWT_ISSUER"],
        "aud": JWT["HOLDLINE_JWT_AUDIENCE"],
        "exp": int(time.time()) + 60,
    }
    return jwt.encode({**base, **claims}, secret, algorithm="HS256")


async def _create(
    client: httpx.AsyncClient, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return await client.post("/v1/sessions", json=body, headers={**REMOTE, **headers})


async def test_a_remote_session_needs_the_tenants_credential(client: httpx.AsyncClient) -> None:
    assert_problem(await _create(client, {"user_id": "ana", "tenant_id": "acme"}), 401)
    # Another tenant's key does not open a session for acme.
    refused = await _create(
        client, {"user_id": "ana", "tenant_id": "acme"}, **{"X-Api-Key": API_KEYS["globex"]}
    )
    assert_problem(refused, 403)
    # The key decides the tenant: no tenant_id needed.
    created = await _create(client, {"user_id": "ana"}, **{"X-Api-Key": API_KEYS["globex"]})
    assert created.status_code == 201, created.text


async def test_a_tenant_signed_jwt_opens_a_session(client: httpx.AsyncClient) -> None:
    token = _jwt({"sub": "ana", "tenant": "acme"})
    created = await _create(client, {"user_id": "ana"}, Authorization=f"Bearer {token}")
    assert created.status_code == 201, created.text
    session = created.json()
    snapshot = await client.get(
        f"/v1/sessions/{session['session_id']}",
        headers={"Authorization": f"Bearer {session['token']}"},
    )
    assert snapshot.status_code == 200, snapshot.text
    # The token speaks for ana of acme only.
    assert_problem(
        await _create(client, {"user_id": "bob"}, Authorization=f"Bearer {token}"), 403
    )
    assert_problem(
        await _create(
            client, {"user_id": "ana", "tenant_id": "globex"}, Authorization=f"Bearer {token}"
        ),
        403,
    )


async def test_a_forged_or_expired_jwt_is_refused(client: httpx.AsyncClient) -> None:
    forged = _jwt({"sub": "ana", "tenant": "acme"}, secret="not-the-tenants-secret" * 2)
    expired = _jwt({"sub": "ana", "tenant": "acme", "exp": int(time.time()) - 300})
    for token in (forged, expired):
        refused = await _create(client, {"user_id": "ana"}, Authorization=f"Bearer {token}")
        assert_problem(refused, 401)


async def test_only_declared_agents_the_tenant_may_use(client: httpx.AsyncClient) -> None:
    key = {"X-Api-Key": API_KEYS["globex"]}
    assert_problem(
        await _create(client, {"user_id": "ana", "agent": "ghost"}, **key), 404, "unknown-agent"
    )
    assert_problem(
        await _create(client, {"user_id": "ana", "agent": "vip"}, **key), 403, "agent-not-allowed"
    )
    assert (await open_session(client, "acme", agent="vip")).agent == "vip"


async def test_a_handoff_to_an_undeclared_or_forbidden_agent_is_refused(
    client: httpx.AsyncClient,
) -> None:
    chat = await open_session(client, "globex")
    url = f"/v1/sessions/{chat.session_id}/handoff"
    ghost = await client.post(url, json={"agent": "ghost"}, headers=chat.auth)
    assert_problem(ghost, 404, "unknown-agent")
    # concierge hands off only to billing; vip is not globex's anyway.
    assert_problem(await client.post(url, json={"agent": "vip"}, headers=chat.auth), 403)
    assert (await chat.snapshot())["agent"] == "concierge"
    handed = await client.post(url, json={"agent": "billing"}, headers=chat.auth)
    assert handed.status_code == 200, handed.text
