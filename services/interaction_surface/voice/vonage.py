"""Vonage's routes: the answer webhook `GET|POST /v1/telephony/vonage/answer` (an NCCO) and
the call's socket `WS /v1/telephony/vonage`.

The answer webhook returns an NCCO whose `connect` action opens a `websocket` endpoint at
the stream route, with `content-type: audio/l16;rate=<HOLDLINE_VONAGE_AUDIO_RATE>` and the
stream's parameters as its `headers` (Vonage repeats them in `websocket:connected`): the
call's uuid, who the caller is or which session continues, and, when signed, a call ticket
bound to both. The socket route hands the connection to `media_stream.run_stream` with a
`VonageStream`; the start needs that ticket (or the session's token) or it is closed with
4403 before anything is stored. Signing is `vonage_signing`'s; without
`VONAGE_SIGNATURE_SECRET` only local requests are served.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response

from libs.json_response import JSONResponse
from libs.problems import problem

from .call_control import stream_parameters, webhook_body
from .media_stream import run_stream
from .telephony import Telephony
from .trust import TICKET, is_local, issue_ticket, public_url, stream_url
from .vonage_frames import CALL_HEADER, VonageStream
from .vonage_signing import VonageRefused, signed_payload, verify_request

log = logging.getLogger(__name__)

ANSWER_PATH = "/v1/telephony/vonage/answer"
STREAM_PATH = "/v1/telephony/vonage"


def _call_facts(method: str, query: dict[str, str], body: bytes) -> dict[str, Any] | None:
    """What Vonage says about the call: the query of a GET, the JSON body of a POST."""
    if method == "GET" or not body:
        return dict(query)
    try:
        facts = json.loads(body)
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None


def ncco(uri: str, rate: int, headers: dict[str, str]) -> list[dict[str, Any]]:
    """The NCCO that connects the call to holdline's socket."""
    return [{
        "action": "connect",
        "endpoint": [{
            "type": "websocket",
            "uri": uri,
            "content-type": f"audio/l16;rate={rate}",
            "headers": headers,
        }],
    }]


def add_vonage_routes(router: APIRouter, telephony: Telephony) -> None:
    """`GET|POST /v1/telephony/vonage/answer` and `WS /v1/telephony/vonage`."""
    settings = telephony.voice.carriers.vonage
    trust = settings.trust

    async def answer(request: Request) -> Response:
        body = await webhook_body(request)
        if isinstance(body, Response):
            return body
        peer = request.client.host if request.client else None
        url = public_url(telephony.trust, str(request.url), peer, request.headers)
        if trust.signed:
            payload = signed_payload(
                request.method, list(request.query_params.multi_items()), body
            )
            try:
                verify_request(
                    settings.signature_secret, request.headers.get("authorization"), payload,
                    now=telephony.clock.now().timestamp(), max_age_s=settings.ticket_ttl_s,
                )
            except VonageRefused as exc:
                log.warning("telephony: Vonage answer refused (%s)", exc.reason)
                return problem(403, "Forbidden", "bad Vonage signature")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden",
                "VONAGE_SIGNATURE_SECRET is not set: only local requests are served",
            )
        facts = _call_facts(request.method, dict(request.query_params), body)
        if facts is None:
            return problem(400, "Bad request", "the body is not a JSON object")
        caller = facts.get("from")
        params = stream_parameters(
            telephony, request.query_params, caller if isinstance(caller, str) else None
        )
        if isinstance(params, Response):
            return params
        uuid = facts.get("uuid")
        if isinstance(uuid, str) and uuid:
            params[CALL_HEADER] = uuid[:64]
        elif trust.signed:
            return problem(400, "Bad request", "the request names no call uuid")
        if trust.signed:
            params[TICKET] = issue_ticket(
                trust.ticket_key, params[CALL_HEADER], params,
                now=telephony.clock.now().timestamp(), ttl_s=settings.ticket_ttl_s,
            )
        uri = stream_url(url, STREAM_PATH)
        return JSONResponse(ncco(uri, settings.audio_rate, params))

    for method in ("GET", "POST"):
        router.add_api_route(
            ANSWER_PATH, answer, methods=[method], operation_id=f"vonage_answer_{method.lower()}"
        )

    @router.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket) -> None:
        # Vonage signs no socket: the start's ticket (or session token) is the proof.
        await websocket.accept()
        peer = websocket.client.host if websocket.client else None
        await run_stream(
            telephony, VonageStream(), websocket, local=is_local(peer, websocket.headers),
            trust=trust,
        )
