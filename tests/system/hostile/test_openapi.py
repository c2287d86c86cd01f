"""Schemathesis against the published OpenAPI of the surface and the provider (real processes).

The services read their bodies themselves (strict msgspec types) and publish those types as
the request bodies, without FastAPI's default 422 shape they never send (libs.openapi). The
fuzzer uses each running service's `/openapi.json` as served, after checking it declares
every body; the only addition is the resource-name pattern the provider checks after
decoding.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from demo.sandbox_provider.handlers import BODIES as PROVIDER_BODIES
from demo.sandbox_provider.validation import RESOURCE_PATTERN
from services.interaction_surface.chat.routes import BODIES as SURFACE_BODIES
from testkit.hostile import completes_a_tool_call, healthy
from testkit.surface import SurfaceStack, open_chat

# Small on purpose: every example is a real HTTP round trip (a turn is a model call).
EXAMPLES = 50

Operation = APIOperation[Any, Any, Any, Any]
RESOURCE_NAMES = frozenset({"resource", "restaurant", "from_account", "to_account"})
CREATES = {"POST /v1/accesses", "POST /v1/bookings", "POST /v1/transfers"}
# Fault injection answers with the 5xx it is told to (that is its job), and /metrics is
# Prometheus text: neither is part of the API under test.
SKIPPED = {("/v1/demo/faults", "post"), ("/admin/faults", "post"), ("/metrics", "get")}


def completed(
    doc: dict[str, Any],
    bodies: dict[tuple[str, str], type[Any]],
    names: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """The served document, checked to declare the real bodies, with resource patterns added.

    `names` are properties the handler checks against the resource-name pattern after
    decoding; with the pattern in the schema, positive cases can also be accepted.
    """
    schemas = doc["components"]["schemas"]
    for (path, method), kind in bodies.items():
        operation = doc["paths"][path][method]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{kind.__name__}"}, (path, body)
        assert "422" not in operation["responses"], path
        for name, prop in schemas[kind.__name__].get("properties", {}).items():
            if name in names:
                prop["pattern"] = RESOURCE_PATTERN
    return doc


def problem_details(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    """Every refusal is a problem+json document that states its own status; on the MCP
    endpoint, a JSON-RPC error object with a code and a message (the protocol's own form)."""
    if 400 <= response.status_code < 500 and case.operation.path.startswith("/mcp"):
        body = response.json()
        assert body.get("jsonrpc") == "2.0", body
        assert isinstance(body["error"]["code"], int), body
        assert body["error"]["message"], body
        return None
    if 400 <= response.status_code < 500:
        media = response.headers.get("content-type", [""])[0]
        assert media.startswith("application/problem+json"), (response.status_code, media)
        body = response.json()
        assert body["status"] == response.status_code, body
        assert body["title"], body
    return None


def fuzz(
    doc: dict[str, Any],
    base_url: str,
    headers: Callable[[], dict[str, str]],
    ids: dict[str, str],
) -> Counter[tuple[str, int]]:
    """Positive and negative cases for every operation; returns statuses seen per operation."""
    schema = schemathesis.openapi.from_dict(doc)
    seen: Counter[tuple[str, int]] = Counter()
    operations: list[Operation] = []
    for result in schema.get_all_operations():
        # An operation the loader cannot read is itself a defect of the published document.
        assert isinstance(result, Ok), result.err()
        operations.append(result.ok())
    # Deletions last: closing the target session first would leave nothing to reach.
    operations.sort(key=lambda op: op.method.lower() == "delete")
    for operation in operations:
        if (operation.path, operation.method.lower()) in SKIPPED:
            continue
        run(operation, base_url, headers, ids, seen)
    return seen


def run(
    operation: Operation,
    base_url: str,
    headers: Callable[[], dict[str, str]],
    ids: dict[str, str],
    seen: Counter[tuple[str, int]],
) -> None:
    """Fuzz one operation, counting the statuses it answered."""
    known = {k: v for k, v in ids.items() if "{" + k + "}" in operation.path}
    strategies = [operation.as_strategy(mode) for mode in GenerationMode]
    if known:
        # Cases on real ids too, so the fuzzer reaches the handlers behind auth.
        strategies += [
            operation.as_strategy(mode, path_parameters=known) for mode in GenerationMode
        ]

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=st.one_of(strategies))
    def check(case: Case[Any]) -> None:
        response = case.call_and_validate(
            base_url=base_url,
            headers=headers(),
            timeout=20,
            checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
            additional_checks=[problem_details],
        )
        seen[(operation.label, response.status_code)] += 1

    check()


# Hundreds of real round trips (turns call the model): room for a loaded 2-core box.
@pytest.mark.timeout(120)
async def test_surface_api_answers_every_fuzzed_request_without_a_server_error(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    bystander = await open_chat(client)
    target = await open_chat(client)
    doc = completed((await client.get("/openapi.json")).json(), SURFACE_BODIES)
    seen = await asyncio.to_thread(
        fuzz, doc, stack.url, lambda: target.auth, {"session_id": target.session_id}
    )
    statuses = {status for (_label, status) in seen}
    assert not any(status >= 500 for status in statuses), seen
    # The fuzzer got past authentication into the handlers, and also met their refusals.
    reached = {label for (label, status) in seen if status < 300 and "{session_id}" in label}
    assert {
        "GET /v1/sessions/{session_id}",
        "GET /v1/sessions/{session_id}/timeline",
        "POST /v1/sessions/{session_id}/turns",
        "POST /v1/sessions/{session_id}/activity",
        "POST /v1/sessions/{session_id}/handoff",
    } <= reached, seen
    assert {400, 404, 422} <= statuses, seen
    await healthy(stack)
    await completes_a_tool_call(stack, bystander)


@pytest.mark.timeout(120)
async def test_provider_api_answers_every_fuzzed_request_without_a_server_error(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    bystander = await open_chat(client)
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=15.0) as provider:
        doc = completed(
            (await provider.get("/openapi.json")).json(), PROVIDER_BODIES, RESOURCE_NAMES
        )
    seen = await asyncio.to_thread(
        fuzz,
        doc,
        stack.provider_url,
        # A fresh key per request: the fuzzer must reach validation, not replay one answer.
        lambda: {"Idempotency-Key": f"fz-{uuid.uuid4().hex}"},
        {"record_id": "rec-unknown"},
    )
    assert not any(status >= 500 for (_label, status) in seen), seen
    assert {400, 404, 422} <= {status for (_label, status) in seen}, seen
    accepted = sum(n for (label, status), n in seen.items() if label in CREATES and status < 300)
    assert accepted > 0, seen
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=15.0) as provider:
        entries = (await provider.get("/ledger")).json()["entries"]
    fuzzed = [e for e in entries if e["key"].startswith("fz-")]
    # Each accepted request is one effect; every refusal left nothing behind.
    assert len(fuzzed) == accepted, (fuzzed, seen)
    assert all(int(e["effects"]) == 1 for e in fuzzed), fuzzed
    await healthy(stack)
    await completes_a_tool_call(stack, bystander)
