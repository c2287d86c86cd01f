"""RFC 9457 problem details for every HTTP error a service returns."""

from __future__ import annotations

import logging
from typing import Any

import nats.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from libs.json_response import JSONResponse

PROBLEM_JSON = "application/problem+json"

log = logging.getLogger(__name__)


def problem(
    status: int, title: str, detail: str = "", *, slug: str | None = None, **extra: Any
) -> JSONResponse:
    """A problem+json response."""
    body: dict[str, Any] = {
        "type": f"https://holdline.dev/problems/{slug or title.lower().replace(' ', '-')}",
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON)


def install_problem_handlers(app: FastAPI) -> None:
    """Make FastAPI's own errors (404, 405, validation) speak problem+json too."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(exc.status_code, _TITLES.get(exc.status_code, "HTTP error"), str(exc.detail))

    # The broker restarting or a view lagging behind it is not a bug of the request: the
    # client may retry (a turn with the same client_turn_id is answered once, never run twice).
    @app.exception_handler(TimeoutError)
    @app.exception_handler(nats.errors.Error)
    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        # The client only sees the error's class; the log keeps where it came from.
        log.warning("%s %s answered 503: %r", request.method, request.url.path, exc,
                    exc_info=exc)
        response = problem(
            503, "Service unavailable",
            f"the event store did not answer in time ({type(exc).__name__}); retry",
            slug="unavailable",
        )
        response.headers["Retry-After"] = "1"
        return response

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()
        ]
        return problem(
            422, "Invalid request", "the request does not match the schema", errors=errors
        )


_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Invalid request",
    429: "Too many requests",
    503: "Service unavailable",
}
