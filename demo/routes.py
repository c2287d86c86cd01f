"""`/v1/demo/faults`: the demo page's door to the sandbox provider's fault injection."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import Response

from libs.bus import InvalidSubjectToken, token
from services.interaction_surface.core.http import ProblemError, decode_body, read_body
from services.interaction_surface.core.surface import Surface


def add_demo_routes(router: APIRouter, surface: Surface) -> None:
    """`/v1/demo/faults`: the demo page's door to the sandbox provider's fault injection."""
    async def forward(method: str, body: bytes | None = None, path: str = "") -> Response:
        assert surface.http is not None
        try:
            answer = await surface.http.request(
                method,
                f"/admin/faults{path}",
                content=body,
                headers={"content-type": "application/json"} if body is not None else None,
            )
        except httpx.HTTPError as exc:
            raise ProblemError(
                502, "Bad gateway", f"the sandbox provider did not answer: {exc}",
                slug="bad-gateway",
            ) from None
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type", "application/json"),
        )

    @router.get("/v1/demo/faults")
    async def list_faults() -> Response:
        return await forward("GET")

    @router.post("/v1/demo/faults")
    async def add_fault(request: Request) -> Response:
        raw = await read_body(request, surface.settings.max_body_bytes)
        decode_body(raw, dict[str, Any])
        return await forward("POST", raw)

    @router.delete("/v1/demo/faults")
    async def clear_faults() -> Response:
        return await forward("DELETE")

    @router.delete("/v1/demo/faults/{fault_id}")
    async def remove_fault(fault_id: str) -> Response:
        try:
            token(fault_id)
        except InvalidSubjectToken:
            raise ProblemError(404, "Not found", "no such fault") from None
        return await forward("DELETE", path=f"/{fault_id}")
