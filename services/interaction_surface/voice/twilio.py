"""Twilio's webhook and stream routes: `POST /v1/telephony/twilio/voice` (TwiML) and
`WS /v1/telephony/twilio`.

The webhook answers TwiML whose `<Parameter>`s say which session the stream continues or
opens (with a call ticket when signed); the stream route checks the signature, then hands
the socket to `media_stream.run_stream` with `TwilioStream`, which decodes each frame
(`twilio_frames`), and the loop runs the call. While the call is attached, the session's
deliveries are spoken on it (`Call.say`).

Trust (signatures, call tickets, the local-only rule without an auth token) is in
`trust`; the routes here apply it before anything is stored. Who holds a call across
surface processes is `ownership`.
"""

from __future__ import annotations

import logging
from xml.sax.saxutils import quoteattr

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response

from libs.events import SessionOpened
from libs.problems import problem

from ..auth import hash_token, new_token
from .call_control import XML_DOCUMENT, stream_parameters, stream_target, webhook_form, with_ticket
from .call_start import StreamRefused
from .media_stream import run_stream
from .stream_frames import FrameError
from .telephony import SessionLookup, Telephony, VoiceStarted
from .trust import (
    SETTINGS_HEADER,
    SIGNATURE_HEADER,
    TrustSettings,
    compute_signature,
    is_local,
    public_url,
)
from .twilio_frames import TwilioStream

# Importable from here as before (the edge's names).
__all__ = [
    "STREAM_PATH",
    "FrameError",
    "SessionLookup",
    "StreamRefused",
    "Telephony",
    "VoiceStarted",
    "add_telephony_routes",
    "opened_session_event",
    "signature_ok",
    "twilio_signature",
]

log = logging.getLogger(__name__)

_TWILIO = TwilioStream()

STREAM_PATH = "/v1/telephony/twilio"


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's X-Twilio-Signature: base64 HMAC-SHA1 of the URL + sorted POST params."""
    return compute_signature(auth_token, url, list(params.items()))


def signature_ok(auth_token: str, url: str, params: dict[str, str], presented: str | None) -> bool:
    """Whether the presented signature is Twilio's for this request (either port form)."""
    return TrustSettings(auth_token=auth_token).verify(url, list(params.items()), presented)


def add_telephony_routes(router: APIRouter, telephony: Telephony) -> None:
    """`POST /v1/telephony/twilio/voice` and `WS /v1/telephony/twilio`."""
    @router.post("/v1/telephony/twilio/voice", response_class=Response, responses=XML_DOCUMENT)
    async def voice(request: Request) -> Response:
        pairs = await webhook_form(request)
        if isinstance(pairs, Response):
            return pairs
        trust = telephony.trust
        peer = request.client.host if request.client else None
        url = public_url(trust, str(request.url), peer, request.headers)
        if trust.signed:
            signature = request.headers.get(SIGNATURE_HEADER)
            if not trust.verify(url, pairs, signature, request.headers.get(SETTINGS_HEADER)):
                # The query may carry a session token: only the origin and path are logged.
                log.warning(
                    "telephony: voice webhook refused: no valid signature for %s",
                    url.split("?", 1)[0],
                )
                return problem(403, "Forbidden", "bad Twilio signature")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden", "TWILIO_AUTH_TOKEN is not set: only local requests are served"
            )
        form = dict(pairs)
        custom = stream_parameters(telephony, request.query_params, form.get("From"))
        if isinstance(custom, Response):
            return custom
        if trust.signed:
            call_sid = form.get("CallSid", "")
            if not call_sid:
                return problem(400, "Bad request", "the form has no CallSid")
            custom = with_ticket(telephony, trust.ticket_key, call_sid, custom)
        target = stream_target("TwiML", url, STREAM_PATH, peer, request.headers)
        parameters = "".join(
            f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in custom.items()
        )
        twiml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f"<Stream url={quoteattr(target)}>{parameters}</Stream>"
            "</Connect></Response>"
        )
        return Response(twiml, media_type="application/xml")

    @router.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket) -> None:
        trust = telephony.trust
        peer = websocket.client.host if websocket.client else None
        if trust.signed:
            url = public_url(trust, str(websocket.url), peer, websocket.headers)
            signature = websocket.headers.get(SIGNATURE_HEADER)
            if not trust.verify(url, [], signature, websocket.headers.get(SETTINGS_HEADER)):
                log.warning(
                    "telephony: stream refused: no valid signature for %s", url.split("?", 1)[0]
                )
                await websocket.close(code=4403)
                return
        await websocket.accept()
        await run_stream(
            telephony, _TWILIO, websocket, local=is_local(peer, websocket.headers)
        )


def opened_session_event(user_id: str, tenant_id: str, agent: str) -> SessionOpened:
    """A phone-opened session: its token is never shown, only a later chat could not use it."""
    return SessionOpened(
        user_id=user_id, tenant_id=tenant_id, agent=agent, token_hash=hash_token(new_token())
    )

