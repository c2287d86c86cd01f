"""Exotel's routes: the Voicebot applet's URL `GET|POST /v1/telephony/exotel/voicebot` and the
call's stream `WS /v1/telephony/exotel`.

The Voicebot applet takes either a `wss://` URL or an `https://` one that answers
`{"url": "wss://..."}`; holdline is the second kind, so each call gets its own parameters
(up to three, 256 characters in all, as Exotel allows) in the stream URL's query, which
Exotel passes back in the start's `custom_parameters`: who the caller is or which session
continues, and, when authenticated, a call ticket bound to the CallSid and those values.

Exotel signs nothing. Its documented protections are an IP allowlist (arranged with Exotel,
enforced in front of holdline) and HTTP Basic credentials in the applet's URLs
(`https://user:password@host/...`, sent as `Authorization: Basic`): with
`EXOTEL_STREAM_USER`/`EXOTEL_STREAM_PASSWORD` set, both routes require them, and the stream's
start also needs the ticket (or the session's token), else 4403 before anything is stored.
Without them only local requests are served.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from starlette.datastructures import Headers

from libs.json_response import JSONResponse
from libs.problems import problem

from .call_control import stream_parameters, webhook_body
from .carrier_settings import ExotelSettings
from .exotel_frames import ExotelStream
from .media_stream import run_stream
from .telephony import Telephony
from .trust import TICKET, is_local, issue_ticket, public_url, stream_url

log = logging.getLogger(__name__)

VOICEBOT_PATH = "/v1/telephony/exotel/voicebot"
STREAM_PATH = "/v1/telephony/exotel"
# What Exotel passes on from the stream URL's query.
MAX_CUSTOM_PARAMETERS = 3
MAX_CUSTOM_CHARS = 256
_PARAMETER_KEYS = ("session_id", "token", "user_id", "tenant_id", TICKET)


def basic_auth_ok(settings: ExotelSettings, headers: Headers) -> bool:
    """Whether the request carries the configured HTTP Basic credentials."""
    scheme, _, encoded = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return False
    user, sep, password = decoded.partition(":")
    return bool(sep) and hmac.compare_digest(
        f"{user}:{password}".encode(), f"{settings.user}:{settings.password}".encode()
    )


def voicebot_url(
    webhook_url: str, params: dict[str, str], settings: ExotelSettings
) -> str:
    """The stream URL for this call: credentials (when set) and the parameters as its query."""
    parts = urlsplit(stream_url(webhook_url, STREAM_PATH))
    netloc = parts.netloc
    if settings.user:
        userinfo = f"{quote(settings.user, safe='')}:{quote(settings.password, safe='')}"
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc, query=urlencode(params)))


def add_exotel_routes(router: APIRouter, telephony: Telephony) -> None:
    """`GET|POST /v1/telephony/exotel/voicebot` and `WS /v1/telephony/exotel`."""
    settings = telephony.voice.carriers.exotel
    trust = settings.trust

    async def voicebot(request: Request) -> Response:
        body = await webhook_body(request)
        if isinstance(body, Response):
            return body
        peer = request.client.host if request.client else None
        if trust.signed:
            if not basic_auth_ok(settings, request.headers):
                log.warning("telephony: Exotel voicebot URL refused: no valid credentials")
                return problem(403, "Forbidden", "bad Exotel credentials")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden",
                "EXOTEL_STREAM_USER is not set: only local requests are served",
            )
        query = request.query_params
        params = stream_parameters(telephony, query, query.get("CallFrom"))
        if isinstance(params, Response):
            return params
        if trust.signed:
            call_sid = query.get("CallSid", "")
            if not call_sid:
                return problem(400, "Bad request", "the request has no CallSid")
            params[TICKET] = issue_ticket(
                trust.ticket_key, call_sid, params,
                now=telephony.clock.now().timestamp(), ttl_s=settings.ticket_ttl_s,
            )
        chars = len(urlencode(params))
        if len(params) > MAX_CUSTOM_PARAMETERS or chars > MAX_CUSTOM_CHARS:
            log.warning(
                "telephony: the Exotel stream URL carries %d parameters in %d characters; "
                "Exotel passes at most %d in %d", len(params), chars,
                MAX_CUSTOM_PARAMETERS, MAX_CUSTOM_CHARS,
            )
        url = public_url(telephony.trust, str(request.url), peer, request.headers)
        return JSONResponse({"url": voicebot_url(url, params, settings)})

    for method in ("GET", "POST"):
        router.add_api_route(
            VOICEBOT_PATH, voicebot, methods=[method],
            operation_id=f"exotel_voicebot_{method.lower()}",
        )

    @router.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket) -> None:
        if trust.signed and not basic_auth_ok(settings, websocket.headers):
            log.warning("telephony: Exotel stream refused: no valid credentials")
            await websocket.close(code=4403)
            return
        await websocket.accept()
        peer = websocket.client.host if websocket.client else None
        query = websocket.query_params
        fallback = {key: query[key] for key in _PARAMETER_KEYS if key in query}
        await run_stream(
            telephony, ExotelStream(fallback), websocket,
            local=is_local(peer, websocket.headers), trust=trust,
        )
