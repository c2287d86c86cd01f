"""What every function-calling adapter shares, whatever the wire format.

The functions offered for a turn (each tool, `cancel_<tool>` for the cancellable ones,
`confirm_operation`, `undo_operation`), the system prompt and the per-turn context, the
mapping of the model's function calls to proposed calls and explicit requests (a call the
application cannot use is dropped with its reason, never admitted), and the honesty rules
of a reply: with requests, only the acceptance speaks for them; with only dropped calls,
the reply apologises; with nothing at all, it is a model error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .interface import (
    LiveOperation,
    ModelError,
    OperationOutcome,
    ProposedCall,
    ToolSpec,
    TurnReply,
    TurnRequest,
    call_id,
)
from .phrasing import Lang, base_language, join_text, pending_preamble, reply_language

log = logging.getLogger(__name__)

CONFIRM = "confirm_operation"
UNDO = "undo_operation"
CANCEL_PREFIX = "cancel_"
LANGUAGE_NAMES = {"es": "Spanish", "en": "English"}

# (provider call id, function name, arguments JSON) of one call the model made.
FunctionCall = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Function:
    """One function offered to the model, before an adapter puts it in its wire format."""

    name: str
    description: str
    parameters: dict[str, Any]


def _operation_parameters(*, with_answer: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "operation_id": {"type": "string", "description": "The id from the operations list."}
    }
    required = ["operation_id"]
    if with_answer:
        properties["yes"] = {"type": "boolean", "description": "true to go ahead, false to not."}
        required.append("yes")
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def offered_functions(tools: Sequence[ToolSpec]) -> list[Function]:
    """Each tool, `cancel_<tool>` when cancellable, and the confirmation and undo functions."""
    out = [Function(spec.name, spec.description, spec.parameters) for spec in tools]
    out += [
        Function(
            f"{CANCEL_PREFIX}{spec.name}",
            f"Cancel a {spec.name} operation that has not finished. Only when the user "
            "explicitly asks to cancel it.",
            _operation_parameters(),
        )
        for spec in tools
        if spec.cancellable
    ]
    out.append(
        Function(
            CONFIRM,
            "The user's yes or no to an operation awaiting confirmation.",
            _operation_parameters(with_answer=True),
        )
    )
    out.append(
        Function(
            UNDO,
            "Undo an operation that already went through (runs its compensation). Only "
            "when the user explicitly asks to undo or revert it.",
            _operation_parameters(),
        )
    )
    return out


def instructions(request: TurnRequest, lang: Lang) -> str:
    """The system prompt of a turn."""
    language = LANGUAGE_NAMES.get(lang, lang)
    return (
        f"You are {request.agent}, an assistant whose tools have real side effects. "
        "Call tools to act; several independent actions can be called in parallel. "
        "Tools run in the background: never say an action is done, booked, sent or granted "
        "unless the operations list shows it as committed. "
        "Put several accesses in one provision_access call. To change a booking, call "
        "book_table again with the same restaurant and date and the new details. "
        "Cancel (cancel_<tool>) only when the user explicitly asks; 'wait' or a pause is "
        "never a cancellation. Use confirm_operation for a yes or no to an operation "
        "awaiting confirmation, and undo_operation to reverse one that was committed. "
        f"Answer briefly, in {language}."
    )


def turn_context(request: TurnRequest) -> str:
    """Live operations and pending updates for this turn only: never stored as a message."""
    lines = ["Context for this turn only; it is not part of the conversation."]
    if request.today:
        lines.append(f"Today is {request.today}.")
    if request.live_operations:
        lines.append("Operations in this session (id · tool · status · what · arguments):")
        for op in request.live_operations:
            args = json.dumps(op.arguments, sort_keys=True, ensure_ascii=False)
            line = f"- {op.operation_id} · {op.tool} · {op.status} · {op.label} · {args}"
            if op.prompt:
                line += f" · asks: {op.prompt}"
            lines.append(line)
    else:
        lines.append("No operations are in progress in this session.")
    if request.pending_updates:
        lines.append(
            "The user has just been told these earlier results, right before your answer; "
            "do not repeat them:"
        )
        lines.extend(f"- {update.text}" for update in request.pending_updates)
    return "\n".join(lines)


def failure_prompt(outcomes: Sequence[OperationOutcome], language: str) -> tuple[str, str]:
    """(system, user) messages asking for a short closing about failed operations."""
    lang = base_language(language)
    listed = [
        {"what": o.label, "tool": o.tool, "status": o.status, "detail": o.detail}
        for o in outcomes
    ]
    system = (
        "Write one short message to the user about these operations: what worked, what "
        "failed and why, and one concrete alternative they can take. Only a status of "
        "'committed' means it worked. Answer in "
        f"{LANGUAGE_NAMES.get(lang, lang)}, with no preamble."
    )
    return system, json.dumps(listed, ensure_ascii=False)


@dataclass(slots=True)
class Mapped:
    """A reply's function calls, sorted into what the application may act on."""

    calls: list[ProposedCall] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    confirmations: list[tuple[str, bool]] = field(default_factory=list)
    compensations: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def map_calls(
    request: TurnRequest, raw: Sequence[FunctionCall], *, vendor: str = "model"
) -> Mapped:
    """Function calls → proposed calls and explicit requests; the rest dropped with a reason."""
    offered = {spec.name: spec for spec in request.tools}
    live: dict[str, LiveOperation] = {op.operation_id: op for op in request.live_operations}
    out = Mapped()

    def drop(reason: str) -> None:
        log.warning("%s: dropped a tool call: %s", vendor, reason)
        out.dropped.append(reason)

    for index, (provider_id, name, arguments) in enumerate(raw):
        try:
            args = json.loads(arguments) if arguments else {}
        except json.JSONDecodeError as exc:
            drop(f"{name or '?'}: arguments are not valid JSON ({exc.msg})")
            continue
        if not isinstance(args, dict):
            drop(f"{name or '?'}: arguments are not a JSON object")
            continue
        if name in offered:
            out.calls.append(
                ProposedCall(name, args, provider_id or call_id(request.turn_id, index))
            )
            continue
        target = name.removeprefix(CANCEL_PREFIX)
        is_cancel = (
            name.startswith(CANCEL_PREFIX) and target in offered and offered[target].cancellable
        )
        if not (is_cancel or name in {CONFIRM, UNDO}):
            drop(f"{name or '?'}: unknown function")
            continue
        op_id = args.get("operation_id")
        op = live.get(op_id) if isinstance(op_id, str) else None
        if op is None:
            drop(f"{name}: unknown operation {op_id!r}")
        elif is_cancel and op.tool != target:
            drop(f"{name}: operation {op_id} is a {op.tool}, not a {target}")
        elif is_cancel:
            out.cancels.append(op.operation_id)
        elif name == CONFIRM:
            yes = args.get("yes")
            if isinstance(yes, bool):
                out.confirmations.append((op.operation_id, yes))
            else:
                drop(f"{name}: 'yes' must be true or false")
        else:
            out.compensations.append(op.operation_id)
    return out


def honest_reply(
    request: TurnRequest,
    text: str,
    calls: Sequence[FunctionCall],
    *,
    vendor: str,
    dropped: Sequence[str] = (),
) -> TurnReply:
    """The turn's reply from what the model said and called, under the honesty rules.

    `dropped`: calls the adapter already refused (an answer cut mid-way), kept as reasons.
    """
    mapped = map_calls(request, calls, vendor=vendor)
    mapped.dropped[:0] = dropped
    lang = reply_language(request)
    preamble = pending_preamble(request.pending_updates, lang)
    requests = mapped.calls or mapped.cancels or mapped.confirmations or mapped.compensations
    if requests:
        # The acceptance speaks for the requests; the model's own words could claim them.
        reply_text = preamble
    elif text.strip():
        reply_text = join_text([preamble, text])
    elif mapped.dropped:
        reply_text = join_text(
            [
                preamble,
                "Perdona, no he podido entenderlo bien. ¿Me lo dices de otra forma?"
                if lang == "es"
                else "Sorry, I couldn't act on that. Could you say it another way?",
            ]
        )
    else:
        raise ModelError(f"{vendor}: the response had neither text nor tool calls")
    return TurnReply(
        text=reply_text,
        calls=tuple(mapped.calls),
        cancels=tuple(dict.fromkeys(mapped.cancels)),
        confirmations=tuple(dict.fromkeys(mapped.confirmations)),
        compensations=tuple(dict.fromkeys(mapped.compensations)),
        attached=tuple(update.delivery_id for update in request.pending_updates),
        dropped=tuple(mapped.dropped),
    )
