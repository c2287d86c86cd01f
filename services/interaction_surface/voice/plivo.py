"""Plivo's webhook and stream routes: `POST /v1/telephony/plivo/voice` (answer XML) and
`WS /v1/telephony/plivo`.

The webhook is a Plivo application's answer URL: Plivo posts the call's form (`CallUUID`,
`From`, `To`, ...) signed with `X-Plivo-Signature-V3` (`plivo_trust`), and holdline answers
XML whose `<Stream>` opens a bidirectional μ-law stream to the WebSocket route, its
`extraHeaders` carrying which session the stream continues or opens (and, when signed, a
call ticket bound to the call and those parameters; `plivo_frames.pack_parameters`). The
stream route hands the socket to `media_stream.run_stream` with `PlivoStream` and Plivo's
ticket trust.
"""

from __future__ import annotations

import logging
from xml.sax.saxutils import escape, quoteattr

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response

from libs.problems import problem

from .call_control import XML_DOCUMENT, stream_parameters, stream_target, webhook_form, with_ticket
from .media_stream import run_stream
from .plivo_frames import MAX_EXTRA_HEADERS, PlivoStream, pack_parameters
from .plivo_trust import NONCE_HEADER, SIGNATURE_HEADER
from .telephony import Telephony
from .trust import is_local, public_url

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/telephony/plivo/voice"
STREAM_PATH = "/v1/telephony/plivo"
_PLIVO = PlivoStream()


def answer_xml(target: str, extra_headers: str) -> str:
    """The answer XML that connects the call to a bidirectional μ-law stream."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response>'
        '<Stream bidirectional="true" keepCallAlive="true" audioTrack="inbound" '
        f'contentType="audio/x-mulaw;rate=8000" extraHeaders={quoteattr(extra_headers)}>'
        f"{escape(target)}</Stream></Response>"
    )


def add_plivo_routes(router: APIRouter, telephony: Telephony) -> None:
    """`POST /v1/telephony/plivo/voice` and `WS /v1/telephony/plivo`."""

    @router.post(VOICE_PATH, response_class=Response, responses=XML_DOCUMENT)
    async def plivo_voice(request: Request) -> Response:
        pairs = await webhook_form(request)
        if isinstance(pairs, Response):
            return pairs
        trust = telephony.voice.carriers.plivo
        peer = request.client.host if request.client else None
        url = public_url(telephony.trust, str(request.url), peer, request.headers)
        if trust.signed:
            nonce = request.headers.get(NONCE_HEADER)
            if not trust.verify("POST", url, pairs, nonce, request.headers.get(SIGNATURE_HEADER)):
                log.warning(
                    "telephony: Plivo webhook refused: no valid signature for %s",
                    url.split("?", 1)[0],
                )
                return problem(403, "Forbidden", "bad Plivo signature")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden", "PLIVO_AUTH_TOKEN is not set: only local requests are served"
            )
        form = dict(pairs)
        params = stream_parameters(telephony, request.query_params, form.get("From"))
        if isinstance(params, Response):
            return params
        if trust.signed:
            call_uuid = form.get("CallUUID", "")
            if not call_uuid:
                return problem(400, "Bad request", "the form has no CallUUID")
            params = with_ticket(telephony, trust.ticket_key, call_uuid, params)
        extra = pack_parameters(params)
        if len(extra) > MAX_EXTRA_HEADERS:
            return problem(400, "Bad request", "the stream parameters exceed Plivo's 512 bytes")
        target = stream_target("Plivo XML", url, STREAM_PATH, peer, request.headers)
        return Response(answer_xml(target, extra), media_type="application/xml")

    @router.websocket(STREAM_PATH)
    async def plivo_stream(websocket: WebSocket) -> None:
        # Plivo does not sign the stream: the start's call ticket (or session token) is the
        # proof, checked before anything is stored.
        peer = websocket.client.host if websocket.client else None
        await websocket.accept()
        await run_stream(
            telephony, _PLIVO, websocket, local=is_local(peer, websocket.headers),
            trust=telephony.voice.carriers.plivo,
        )
