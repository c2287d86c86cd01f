"""HTTP plumbing every channel's routes share: problem+json answers, strict bodies, denials.

Bodies are read with a byte limit (a larger body is drained and answered 413, so the client
always gets its answer) and decoded with msgspec into strict types: malformed JSON or
invalid UTF-8 → 400, wrong types or missing fields → 422, all as problem+json. A refused
WebSocket gets its HTTP answer where the server supports it. `install` answers
`ProblemError` and keeps `?token=` values out of the server's logs.
"""

from __future__ import annotations

import logging
import re
from typing import Any, TypeVar

import msgspec
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import Response
from pydantic import BaseModel

from libs.json_response import JSONResponse
from libs.problems import PROBLEM_JSON, problem

log = logging.getLogger(__name__)

# Drained beyond the limit so the client reads its 413; past this we stop reading.
_DRAIN_LIMIT = 64 * 1024 * 1024

B = TypeVar("B")


class ProblemError(Exception):
    """Raised inside a handler; answered as problem+json."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail or title)
        self.status = status
        self.title = title
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> JSONResponse:
        """The problem+json answer."""
        answer = problem(self.status, self.title, self.detail, **self.extra)
        answer.headers.update(self.headers)
        return answer


def not_found() -> ProblemError:
    return ProblemError(404, "Not found", "no such session")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or 413 once it exceeds `limit` (the rest is drained, not kept)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > _DRAIN_LIMIT:
        raise ProblemError(413, "Payload too large", f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > _DRAIN_LIMIT:
            break
    if size > limit:
        raise ProblemError(413, "Payload too large", f"the body exceeds {limit} bytes")
    return b"".join(chunks)


def decode_body(raw: bytes, kind: type[B]) -> B:
    """Strict JSON decoding with the right status for each kind of mistake."""
    if not raw.strip():
        raise ProblemError(400, "Bad request", "the request body is empty")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ProblemError(422, "Invalid request", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ProblemError(400, "Bad request", f"malformed JSON: {exc}") from None


async def request_body(request: Request, kind: type[B], limit: int) -> B:
    """The body read within `limit` and decoded strictly as `kind` (413, 400 or 422 if not)."""
    return decode_body(await read_body(request, limit), kind)


class ProblemOut(BaseModel):
    """RFC 9457 problem details, as every error of this API is answered."""

    type: str
    title: str
    status: int
    detail: str = ""


def documented_problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: each status answered as problem+json."""
    # Documented so OpenAPI clients (and the hostile-input suite) know every error shape.
    content = {PROBLEM_JSON: {"schema": ProblemOut.model_json_schema()}}
    return {code: {"model": ProblemOut, "content": content} for code in statuses}


async def deny(websocket: WebSocket, response: Response) -> None:
    """Refuse a WebSocket: the HTTP answer itself (404 problem+json) where the server
    supports it, else a close with 4000 + its status."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=4000 + response.status_code)


_TOKEN_IN_QUERY = re.compile(r"([?&](?:token|ticket)=)[^&\s\"']+")


class RedactTokens(logging.Filter):
    """Hides `?token=` and `?ticket=` values: uvicorn logs every WebSocket's path with its
    query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message without the token; never drop the record."""
        message = record.getMessage()
        if "token=" in message or "ticket=" in message:
            record.msg = _TOKEN_IN_QUERY.sub(r"\1<redacted>", message)
            record.args = None
        return True


def install(app: FastAPI) -> None:
    """The problem answer for ProblemError, and tokens kept out of the server's logs."""
    for name in ("uvicorn.error", "uvicorn.access", "uvicorn"):
        logging.getLogger(name).addFilter(RedactTokens())

    @app.exception_handler(ProblemError)
    async def on_problem(_request: Request, exc: ProblemError) -> Response:
        return exc.response()
