"""What every carrier's webhook shares: reading its bounded body, and the parameters it puts
in its call-control document (TwiML, NCCO, a Voicebot URL) for the stream's start to carry.

The parameters say which session the stream continues (`session_id` + `token`, from the
webhook URL's query) or who opens one (`user_id` + `tenant_id`: the query's, else the caller's
number as `tel-<digits>`, else `caller`; the tenant defaults to the surface's). A signed
webhook adds the call ticket (`trust.issue_ticket`) bound to the call id and these values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fastapi import Request
from fastapi.responses import Response

from libs.problems import problem

from .telephony import ID_PATTERN

# A webhook's body is about a kilobyte; past this it is refused (413).
MAX_WEBHOOK_BYTES = 64 * 1024


def caller_id(raw: str | None) -> str | None:
    """A user id from the caller's number (`tel-<digits>`), or None without one."""
    if not raw:
        return None
    digits = re.sub(r"[^A-Za-z0-9_.-]", "", raw)
    return f"tel-{digits}"[:64] if digits else None


async def webhook_body(request: Request) -> bytes | Response:
    """The webhook's raw body, or the problem answer (413) when it is too large."""
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_WEBHOOK_BYTES:
            return problem(413, "Payload too large", f"the body exceeds {MAX_WEBHOOK_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def stream_parameters(
    query: Mapping[str, str], caller: str | None, default_tenant: str
) -> dict[str, str] | Response:
    """The stream's parameters: a session to continue, or the caller to open one; a
    problem answer (400) when the query names them badly."""
    if query.get("session_id") or query.get("token"):
        session_id, token = query.get("session_id", ""), query.get("token", "")
        if not ID_PATTERN.match(session_id) or not token or len(token) > 128:
            return problem(400, "Bad request", "session_id and token must both be valid")
        return {"session_id": session_id, "token": token}
    user = query.get("user_id") or caller_id(caller) or "caller"
    tenant = query.get("tenant_id") or default_tenant
    if not ID_PATTERN.match(user) or not ID_PATTERN.match(tenant):
        return problem(400, "Bad request", "user_id and tenant_id must be ids of 1-64 characters")
    return {"user_id": user, "tenant_id": tenant}
