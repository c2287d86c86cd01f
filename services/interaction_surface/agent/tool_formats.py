"""The tool-call request's inputs and the tools' definitions in each model format.

Bad input is refused whole before anything is written (`BadCalls`): an unknown tool,
arguments that are not a JSON object or do not match the tool's published schema, a
`tool_call_id` over 256 bytes or repeated within the request. The built-in
`confirm_operation` tool is offered with the tools whenever one of them may need a yes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from libs.admission.rules import check_item
from libs.tools import Caller, ToolDeclaration, ToolRegistry

from ..chat.conversation import tool_spec

MAX_TOOL_CALL_ID_BYTES = 256
CONFIRM_TOOL = "confirm_operation"
FORMATS = ("openai", "anthropic", "json-schema")

Ref = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class CallIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One call as the model emitted it."""

    tool_call_id: Annotated[str, msgspec.Meta(min_length=1)]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)


class ToolCallsBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/tool-calls`."""

    calls: Annotated[list[CallIn], msgspec.Meta(min_length=1, max_length=64)]
    turn_id: Ref | None = None
    response_id: Ref | None = None
    user_text: Annotated[str, msgspec.Meta(max_length=4000)] | None = None


class ConfirmArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The user's answer to an operation awaiting confirmation."""

    operation_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    confirmed: bool


class BadCalls(Exception):
    """The request is refused whole; nothing was written."""


class StillAnswering(Exception):
    """A repeated tool_call_id whose first request has not finished."""


# --------------------------------------------------------------------------- definitions


def offered(registry: ToolRegistry, agent: str) -> list[ToolDeclaration]:
    """The tools the agent may call: not internal, and allowed to that agent."""
    return [
        t for t in registry.tools()
        if not t.internal and (t.agents is None or agent in t.agents)
    ]


def _confirm_spec() -> dict[str, Any]:
    return {
        "name": CONFIRM_TOOL,
        "description": (
            "Record the user's answer to an operation that awaits confirmation (an earlier "
            "tool result names its operation_id). Use confirmed=true only after the user "
            "clearly said yes; confirmed=false when they said no."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "operation_id": {"type": "string"},
                "confirmed": {"type": "boolean"},
            },
            "required": ["operation_id", "confirmed"],
            "additionalProperties": False,
        },
    }


def _needs_confirm_tool(tools: Sequence[ToolDeclaration]) -> bool:
    names = {t.name for t in tools}
    return CONFIRM_TOOL not in names and any(
        t.needs_confirmation or t.duplicate_policy == "confirm" for t in tools
    )


def definitions(tools: Sequence[ToolDeclaration], fmt: str) -> list[dict[str, Any]]:
    """The tools as function definitions in one model vendor's format."""
    specs: list[dict[str, Any]] = []
    for declaration in tools:
        spec = tool_spec(declaration)
        specs.append(
            {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
        )
    if _needs_confirm_tool(tools):
        specs.append(_confirm_spec())
    if fmt == "openai":
        return [{"type": "function", "function": s} for s in specs]
    if fmt == "anthropic":
        return [
            {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
            for s in specs
        ]
    return specs


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True, slots=True)
class Prepared:
    """One validated call."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    declaration: ToolDeclaration | None
    # How many admission outcomes it yields (one per batch item).
    items: int = 1


def _arguments(call: CallIn) -> dict[str, Any]:
    if isinstance(call.arguments, dict):
        return call.arguments
    text = call.arguments.strip() or "{}"
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise BadCalls(f"{call.tool_call_id}: arguments are not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise BadCalls(f"{call.tool_call_id}: arguments must be a JSON object")
    return parsed


def _check_item(
    call_id: str, declaration: ToolDeclaration, item: dict[str, Any], caller: Caller
) -> None:
    """Refuse what can never be admitted; leave authorisation to admission, which records it.

    The same order as admission (authorise, normalise, validate): a caller's own
    tenant-qualified resource ("acme/github") fits the schema only once it is stripped.
    """
    checked = check_item(declaration, item, caller)
    if isinstance(checked, tuple) and checked[0] == "invalid_arguments":
        raise BadCalls(f"{call_id}: arguments do not match {declaration.name}: {checked[1]}")


def _check_schema(
    call_id: str, declaration: ToolDeclaration, args: dict[str, Any], caller: Caller
) -> int:
    """Validate against the published schema; the number of batch items."""
    if declaration.batch_field and declaration.item_field:
        extra = set(args) - {declaration.batch_field}
        if extra:
            raise BadCalls(
                f"{call_id}: {declaration.name} has no argument {', '.join(sorted(extra))}"
            )
        items = args.get(declaration.batch_field)
        if not isinstance(items, list) or not 1 <= len(items) <= declaration.max_batch:
            raise BadCalls(
                f"{call_id}: {declaration.batch_field} must be a list of 1 to "
                f"{declaration.max_batch} items"
            )
        for item in items:
            _check_item(call_id, declaration, {declaration.item_field: item}, caller)
        return len(items)
    _check_item(call_id, declaration, args, caller)
    return 1


def prepare(
    body: ToolCallsBody, tools: Sequence[ToolDeclaration], caller: Caller
) -> list[Prepared]:
    """Every call checked; BadCalls names the first that is not acceptable."""
    by_name = {t.name: t for t in tools}
    confirm = _needs_confirm_tool(tools)
    seen: set[str] = set()
    prepared: list[Prepared] = []
    for call in body.calls:
        call_id = call.tool_call_id
        if len(call_id.encode()) > MAX_TOOL_CALL_ID_BYTES:
            raise BadCalls(f"a tool_call_id is longer than {MAX_TOOL_CALL_ID_BYTES} bytes")
        if call_id in seen:
            raise BadCalls(f"tool_call_id {call_id!r} appears twice in the request")
        seen.add(call_id)
        args = _arguments(call)
        declaration = by_name.get(call.name)
        if declaration is not None:
            items = _check_schema(call_id, declaration, args, caller)
            prepared.append(Prepared(call_id, call.name, args, declaration, items))
        elif confirm and call.name == CONFIRM_TOOL:
            try:
                msgspec.convert(args, ConfirmArgs)
            except msgspec.ValidationError as exc:
                raise BadCalls(f"{call_id}: arguments do not match {CONFIRM_TOOL}: {exc}") from None
            prepared.append(Prepared(call_id, call.name, args, None))
        else:
            raise BadCalls(f"{call_id}: unknown tool {call.name!r} for this agent")
    return prepared
