"""Errors of the infrastructure reach clients as problem+json they can act on."""

from __future__ import annotations

import httpx
import nats.errors
from fastapi import FastAPI

from libs.problems import PROBLEM_JSON, install_problem_handlers


def _app() -> FastAPI:
    app = FastAPI()
    install_problem_handlers(app)

    @app.get("/lagging")
    async def lagging() -> None:
        raise TimeoutError("interaction not applied up to 12")

    @app.get("/broker-down")
    async def broker_down() -> None:
        raise nats.errors.NoRespondersError

    @app.get("/bug")
    async def bug() -> None:
        raise ValueError("a defect stays a 500")

    return app


async def test_broker_and_view_timeouts_are_503_with_retry_after() -> None:
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for path in ("/lagging", "/broker-down"):
            response = await client.get(path)
            assert response.status_code == 503, path
            assert response.headers["content-type"].startswith(PROBLEM_JSON)
            assert response.headers["retry-after"] == "1"
            body = response.json()
            assert body["status"] == 503
            assert body["type"].endswith("/unavailable")
        # Only infrastructure errors are softened: a defect is still a server error.
        assert (await client.get("/bug")).status_code == 500
