"""RFC 9457 problem details. ``type`` is a URI reference relative to the provider root
(``/problems/<slug>``): stable for clients to switch on, without claiming a domain.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec
from starlette.responses import Response

PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
PROBLEM_BASE: Final = "/problems/"


def problem_body(
    status: int, slug: str, title: str, detail: str, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
    }
    if extra:
        body.update(extra)
    return body


def encode(body: Mapping[str, Any]) -> bytes:
    return msgspec.json.encode(body)


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    extra: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return Response(
        encode(problem_body(status, slug, title, detail, extra)),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=dict(headers) if headers else None,
    )


class ProblemError(Exception):
    """Raised by handlers to answer with a problem document."""

    def __init__(
        self,
        status: int,
        slug: str,
        title: str,
        detail: str,
        *,
        extra: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail
        self.extra = dict(extra) if extra else {}
        self.headers = dict(headers) if headers else {}

    def response(self) -> Response:
        return problem_response(
            self.status, self.slug, self.title, self.detail, extra=self.extra, headers=self.headers
        )
