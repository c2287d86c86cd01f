"""What every carrier's call-control webhook does before it answers with its document.

A carrier's voice webhook (Twilio's TwiML, Telnyx's TeXML, Plivo's answer XML) reads a
small form body (`webhook_body`, `parse_form`), decides which session the call's stream
continues or opens (`stream_parameters`, from the webhook URL's query and the caller's
number), binds a call ticket to the call and those parameters when the carrier's requests
are signed (`with_ticket`), and points the stream at the public WebSocket URL
(`stream_target`). Each carrier's routes module applies its own signature check first.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from libs.problems import problem

from .telephony import ID_PATTERN, Telephony
from .trust import TICKET, form_pairs, is_local, issue_ticket, stream_url

# How a webhook that answers a call-control document (TwiML, TeXML, Plivo XML) documents its
# answer in the OpenAPI document: XML, not JSON.
XML_DOCUMENT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The call-control document that connects the call's media stream.",
        "content": {"application/xml": {"schema": {"type": "string"}}},
    }
}

log = logging.getLogger(__name__)

# A voice webhook's form is about a kilobyte; past this it is refused (413).
MAX_WEBHOOK_BYTES = 64 * 1024

_unsafe_logged: set[str] = set()


async def webhook_body(request: Request) -> bytes | Response:
    """The webhook's raw body, or the problem answer (413) when it is too large."""
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_WEBHOOK_BYTES:
            return problem(413, "Payload too large", f"the form exceeds {MAX_WEBHOOK_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def parse_form(raw: bytes) -> list[tuple[str, str]] | Response:
    """Every (key, value) of a form body, or the problem answer (400) when it is not UTF-8."""
    try:
        return form_pairs(raw)
    except UnicodeDecodeError:
        return problem(400, "Bad request", "the form is not UTF-8")


async def webhook_form(request: Request) -> list[tuple[str, str]] | Response:
    """Every (key, value) of the webhook's form, or the problem answer for a bad body."""
    raw = await webhook_body(request)
    return raw if isinstance(raw, Response) else parse_form(raw)


def caller_id(raw: str | None) -> str | None:
    """A user id for a caller's number (`tel-<digits>`), or None without one."""
    if not raw:
        return None
    digits = re.sub(r"[^A-Za-z0-9_.-]", "", raw)
    return f"tel-{digits}"[:64] if digits else None


def stream_parameters(
    telephony: Telephony, query: Any, caller: str | None
) -> dict[str, str] | Response:
    """The stream's parameters: a session to continue (`session_id` + `token` in the
    webhook's query), or the caller to open one (`user_id`, `tenant_id`)."""
    if query.get("session_id") or query.get("token"):
        session_id, token = query.get("session_id", ""), query.get("token", "")
        if not ID_PATTERN.match(session_id) or not token or len(token) > 128:
            return problem(400, "Bad request", "session_id and token must both be valid")
        return {"session_id": session_id, "token": token}
    user = query.get("user_id") or caller_id(caller) or "caller"
    tenant = query.get("tenant_id") or telephony.default_tenant
    if not ID_PATTERN.match(user) or not ID_PATTERN.match(tenant):
        return problem(400, "Bad request", "user_id and tenant_id must be ids of 1-64 characters")
    return {"user_id": user, "tenant_id": tenant}


def with_ticket(
    telephony: Telephony, key: bytes, call_id: str, params: dict[str, str]
) -> dict[str, str]:
    """The parameters with a call ticket for this call and exactly these parameters."""
    ticket = issue_ticket(
        key, call_id, params, now=telephony.clock.now().timestamp(),
        ttl_s=telephony.trust.ticket_ttl_s,
    )
    return {**params, TICKET: ticket}


def stream_target(
    carrier: str, webhook_url: str, path: str, peer: str | None, headers: Mapping[str, str]
) -> str:
    """The public WebSocket URL of the carrier's stream (warned about once when it is
    ws:// for a caller off this host: carriers connect only to wss://)."""
    target = stream_url(webhook_url, path)
    if target.startswith("ws://") and not is_local(peer, headers) and carrier not in _unsafe_logged:
        _unsafe_logged.add(carrier)
        log.warning(
            "telephony: the %s document points the stream at %s; carriers only connect to "
            "wss:// (set HOLDLINE_PUBLIC_URL or HOLDLINE_TRUSTED_PROXIES)", carrier, target
        )
    return target
