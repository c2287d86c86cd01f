"""FastAPI application factory for the sandbox provider."""

from __future__ import annotations

import http
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from libs import tracing
from libs.json_response import JSONResponse
from libs.openapi import publish

from .handlers import BODIES, add_routes
from .problems import ProblemError, problem_response
from .runtime import Provider
from .settings import Settings
from .validation import InvalidRequestError

log = logging.getLogger("holdline.sandbox_provider")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; the database is opened when the lifespan starts, not here."""
    return build_app(Provider(settings or Settings.from_env()))


def build_app(provider: Provider) -> FastAPI:
    """The app around an existing provider (lets the server runner reach its shutdown)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        tracing.configure("sandbox-provider")
        await provider.start()
        try:
            yield
        finally:
            await provider.stop()

    app = FastAPI(
        title="holdline sandbox provider",
        summary="A system of record with an effect ledger, idempotency keys and fault injection.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        default_response_class=JSONResponse,
    )
    # On the app's own router, not an included one: FastAPI walks included routers (and
    # sums their route versions) on every request.
    add_routes(app.router, provider)
    publish(app, BODIES)
    _install_error_handlers(app)
    # Requests continue the caller's trace (the worker sends it), when tracing is on.
    app.add_middleware(tracing.TracingMiddleware)
    return app


def _install_error_handlers(app: FastAPI) -> None:
    async def on_problem(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return exc.response()

    async def on_invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, InvalidRequestError)
        return problem_response(exc.status, exc.slug, exc.title, exc.detail)

    async def on_http(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        try:
            title = http.HTTPStatus(exc.status_code).phrase
        except ValueError:
            title = "HTTP error"
        slug = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "http-error")
        return problem_response(exc.status_code, slug, title, str(exc.detail), headers=exc.headers)

    async def on_validation(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem_response(
            422, "validation-error", "Request failed validation", str(exc.errors())
        )

    async def on_crash(_: Request, exc: Exception) -> Response:
        log.error("unhandled error", exc_info=exc)
        return problem_response(
            500, "internal-error", "Internal Server Error", "unexpected error; see the logs"
        )

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(InvalidRequestError, on_invalid)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_crash)
