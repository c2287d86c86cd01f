"""The published OpenAPI document, completed with what FastAPI cannot see.

Handlers read their bodies themselves and decode them with strict msgspec types (one
decoder, one set of error messages), so FastAPI knows neither the request bodies nor that
validation errors are problem+json, and it advertises a 422 shape the services never send.
`publish` builds the document once with the real bodies (as JSON Schema components made by
msgspec from the very types the handlers decode) and without the phantom 422.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

_REF = "#/components/schemas/{name}"
# FastAPI's own validation shapes, only referenced by the 422 it documents by default.
_FASTAPI_SHAPES = ("HTTPValidationError", "ValidationError")


def publish(app: FastAPI, bodies: Mapping[tuple[str, str], type[Any]]) -> None:
    """Serve a document whose `(path, method)` operations declare `bodies` as JSON."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(
                title=app.title, version=app.version, routes=app.routes,
                description=app.description,
            )
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for shape in _FASTAPI_SHAPES:
                schemas.pop(shape, None)
            if bodies:
                _, components = msgspec.json.schema_components(
                    sorted(set(bodies.values()), key=lambda kind: kind.__name__),
                    ref_template=_REF,
                )
                schemas.update(components)
            for path, methods in doc.get("paths", {}).items():
                for method, operation in methods.items():
                    operation.get("responses", {}).pop("422", None)
                    kind = bodies.get((path, method))
                    if kind is not None:
                        operation["requestBody"] = {
                            "required": True,
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": _REF.format(name=kind.__name__)}
                                }
                            },
                        }
            app.openapi_schema = doc
        return app.openapi_schema

    # FastAPI's documented way to customise the document is to replace this method.
    app.openapi = document  # type: ignore[method-assign]
