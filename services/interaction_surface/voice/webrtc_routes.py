"""`POST /v1/webrtc/offer` (DESIGN §6d): a browser's SDP offer in, the answer and the call out.

`{sdp, type: "offer", session_id?, token?, user_id?, tenant_id?}` → `{sdp, type: "answer",
call_id}`. `{session_id, token}` continues a session (404 for a wrong token, as every
session route answers); `{user_id, tenant_id?}` opens one under the session-creation rules
(`Surface.identify`: the tenant's key or JWT, loopback only without either; the tenant's
opening limit). The route is the call's authority as the signed voice webhook is Twilio's:
when call tickets are in force it issues one for the call's parameters, and `start_call`
checks and claims it. Errors are problem+json: a body that is not JSON or misses fields
(400/422), an offer that is not SDP (400), no audio m-line or no codec we take (422).
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import Response

from libs.json_response import JSONResponse
from libs.problems import problem

from ..core.http import ProblemError, documented_problems, request_body
from ..core.surface import Surface
from .call_start import CallStart, StreamRefused
from .telephony import Telephony
from .trust import TICKET, issue_ticket
from .webrtc_peer import MAX_SDP_CHARS, OfferRefused, WebRtcPeer, WebRtcPeers, check_offer
from .webrtc_settings import WebRtcSettings

log = logging.getLogger(__name__)

OFFER_PATH = "/v1/webrtc/offer"

Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class OfferBody(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/webrtc/offer`."""

    sdp: Annotated[str, msgspec.Meta(max_length=MAX_SDP_CHARS)]
    type: Literal["offer"]
    session_id: Id | None = None
    token: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    user_id: Id | None = None
    tenant_id: Id | None = None


# The body the route decodes itself, published in the OpenAPI document (libs.openapi).
WEBRTC_BODIES = {(OFFER_PATH, "post"): OfferBody}


async def _parameters(
    surface: Surface, telephony: Telephony, request: Request, body: OfferBody, call_id: str
) -> dict[str, str]:
    """The call's start parameters, once whoever asks may open or continue the session."""
    if body.session_id is not None:
        # 404 for a wrong or missing token, never a hint which was wrong.
        await surface.session_for_token(body.session_id, body.token)
        return {"session_id": body.session_id, "token": body.token or ""}
    if body.user_id is None:
        raise ProblemError(
            422, "Invalid request", "the offer needs session_id and token, or user_id"
        )
    peer = request.client.host if request.client else None
    who = surface.identify(peer, request.headers, body.user_id, body.tenant_id)
    surface.check_agent(who.tenant_id, surface.settings.default_agent)
    surface.limit_open(who.tenant_id)
    params = {"user_id": who.user_id, "tenant_id": who.tenant_id}
    trust = telephony.trust
    if trust.signed:
        params[TICKET] = issue_ticket(
            trust.ticket_key, call_id, params, now=telephony.clock.now().timestamp(),
            ttl_s=trust.ticket_ttl_s,
        )
    return params


def add_webrtc_routes(
    router: APIRouter,
    surface: Surface,
    telephony: Telephony,
    peers: WebRtcPeers,
    settings: WebRtcSettings,
) -> None:
    """`POST /v1/webrtc/offer`."""

    @router.post(OFFER_PATH, responses=documented_problems(400, 401, 403, 404, 413, 422, 429, 503))
    async def offer(request: Request) -> Response:
        peer_host = request.client.host if request.client else None
        surface.limit_address(peer_host, request.headers)
        body = await request_body(request, OfferBody, surface.settings.max_body_bytes)
        try:
            check_offer(body.sdp)
        except OfferRefused as exc:
            return problem(exc.status, "Bad offer", exc.detail)
        if telephony.started is None:
            return problem(503, "Unavailable", "voice is not started yet")
        call_id = telephony.ids.new("wrtc")
        params = await _parameters(surface, telephony, request, body, call_id)
        peer = WebRtcPeer(telephony, surface.view, settings, call_id)
        # The route checked who may open or continue the session; `start_call` applies the
        # session rules and the ticket.
        start = CallStart(call_id=call_id, params=params, local=True)
        try:
            answer = await peer.answer(body.sdp, start)
        except OfferRefused as exc:
            await peer.end("refused")
            return problem(exc.status, "Bad offer", exc.detail)
        except StreamRefused as exc:
            await peer.end("refused")
            status = 404 if exc.code == 4404 else 403
            log.warning("webrtc: call refused (%s)", exc.reason)
            return problem(status, "Not found" if status == 404 else "Forbidden", exc.reason)
        peers.add(peer)
        return JSONResponse({"sdp": answer, "type": "answer", "call_id": call_id})
