"""Telnyx's webhook and stream routes: `POST /v1/telephony/telnyx/voice` (TeXML) and
`WS /v1/telephony/telnyx`.

The webhook is a TeXML application's voice URL: Telnyx posts the call's form (`CallSid`,
`From`, `To`, ...) signed with Ed25519 (`telnyx_trust`), and holdline answers TeXML whose
`<Connect><Stream>` points a bidirectional PCMU stream at the WebSocket route, with
`<Parameter>`s saying which session the stream continues or opens (and, when signed, a call
ticket bound to the call and those parameters). The stream route hands the socket to
`media_stream.run_stream` with `TelnyxStream` (`telnyx_frames`) and Telnyx's ticket trust.
"""

from __future__ import annotations

import logging
from xml.sax.saxutils import quoteattr

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response

from libs.problems import problem

from .call_control import (
    XML_DOCUMENT,
    parse_form,
    stream_parameters,
    stream_target,
    webhook_body,
    with_ticket,
)
from .media_stream import run_stream
from .telephony import Telephony
from .telnyx_frames import TelnyxStream
from .trust import is_local, public_url

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/telephony/telnyx/voice"
STREAM_PATH = "/v1/telephony/telnyx"
_TELNYX = TelnyxStream()


def texml(target: str, params: dict[str, str]) -> str:
    """The TeXML that connects the call to a bidirectional PCMU stream with `params`."""
    parameters = "".join(
        f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in params.items()
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
        f'<Stream url={quoteattr(target)} track="inbound_track" codec="PCMU" '
        f'bidirectionalMode="rtp" bidirectionalCodec="PCMU">{parameters}</Stream>'
        "</Connect></Response>"
    )


def add_telnyx_routes(router: APIRouter, telephony: Telephony) -> None:
    """`POST /v1/telephony/telnyx/voice` and `WS /v1/telephony/telnyx`."""

    @router.post(VOICE_PATH, response_class=Response, responses=XML_DOCUMENT)
    async def telnyx_voice(request: Request) -> Response:
        body = await webhook_body(request)
        if isinstance(body, Response):
            return body
        trust = telephony.voice.carriers.telnyx
        peer = request.client.host if request.client else None
        if trust.signed:
            now = telephony.clock.now().timestamp()
            if not trust.verify(body, request.headers, now=now):
                log.warning("telephony: Telnyx webhook refused: no valid signature")
                return problem(403, "Forbidden", "bad Telnyx signature")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden", "TELNYX_PUBLIC_KEY is not set: only local requests are served"
            )
        pairs = parse_form(body)
        if isinstance(pairs, Response):
            return pairs
        form = dict(pairs)
        params = stream_parameters(telephony, request.query_params, form.get("From"))
        if isinstance(params, Response):
            return params
        if trust.signed:
            # The stream's `start` names the call by its call control id.
            call_id = form.get("CallControlId") or form.get("CallSid", "")
            if not call_id:
                return problem(400, "Bad request", "the form has no CallSid")
            params = with_ticket(telephony, trust.ticket_key, call_id, params)
        url = public_url(telephony.trust, str(request.url), peer, request.headers)
        target = stream_target("TeXML", url, STREAM_PATH, peer, request.headers)
        return Response(texml(target, params), media_type="application/xml")

    @router.websocket(STREAM_PATH)
    async def telnyx_stream(websocket: WebSocket) -> None:
        # Telnyx does not sign the stream: the start's call ticket (or session token) is the
        # proof, checked before anything is stored.
        peer = websocket.client.host if websocket.client else None
        await websocket.accept()
        await run_stream(
            telephony, _TELNYX, websocket, local=is_local(peer, websocket.headers),
            trust=telephony.voice.carriers.telnyx,
        )
