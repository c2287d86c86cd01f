"""Pure pieces of a turn: what the model sees, and the words used when it cannot answer.

The model's ephemeral context (live operations, pending updates) is built here from the
projections and handed to the model for one turn only; none of it becomes a message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import msgspec

from libs.admission import ELSEWHERE
from libs.domain import DeliveryState, OperationState
from libs.domain.delivery import WAITING_DECISIONS, DeliveryStatus
from libs.domain.operation import TERMINAL, OpStatus
from libs.domain.session import Message
from libs.models.interface import (
    AdmissionNote,
    ChatMessage,
    LiveOperation,
    PendingUpdate,
    ToolSpec,
    TurnReply,
)
from libs.models.phrasing import base_language, elsewhere_words, join_text, pending_preamble
from libs.tools import ToolDeclaration

from ..mcp.tasks import task_result

_SPANISH = re.compile(
    r"[¿¡ñáéíóú]|\b(para|las|los|dame|quiero|reserva|mejor|acceso|hola|gracias|no hagas|"
    r"por favor|cómo|como va|sí|vale)\b",
    re.IGNORECASE,
)


def language_of(text: str, default: str) -> str:
    """`es` when the text reads as Spanish, else the configured default."""
    return "es" if _SPANISH.search(text) else default


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    # msgspec puts a struct's own schema under $defs and points at it with $ref.
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        found = schema.get("$defs", {}).get(name)
        if isinstance(found, dict):
            return found
    return schema


def tool_spec(declaration: ToolDeclaration) -> ToolSpec:
    """The tool as the model sees it: a batch tool takes the list of items."""
    schema = _resolve(msgspec.json.schema(declaration.arguments))
    if declaration.batch_field and declaration.item_field:
        item = schema.get("properties", {}).get(declaration.item_field, {"type": "string"})
        schema = {
            "type": "object",
            "properties": {
                declaration.batch_field: {
                    "type": "array",
                    "items": item,
                    "minItems": 1,
                    "maxItems": declaration.max_batch,
                }
            },
            "required": [declaration.batch_field],
            "additionalProperties": False,
        }
    else:
        schema = {k: v for k, v in schema.items() if k not in ("title", "$defs")}
    return ToolSpec(
        name=declaration.name,
        description=declaration.description,
        parameters=schema,
        cancellable=declaration.cancellable,
    )


def history_for_model(messages: Sequence[Message], context_from: int) -> list[ChatMessage]:
    """The visible history the active agent carries (all of it, or since a fresh handoff)."""
    return [
        ChatMessage(role="user" if m.role == "user" else "assistant", text=m.text)
        for m in messages[context_from:]
    ]


# Committed operations stay in view: the user may ask about them or undo them.
_LIVE = frozenset(set(OpStatus) - TERMINAL - {OpStatus.REQUESTED}) | {OpStatus.COMMITTED}


def live_operations(
    operations: Iterable[OperationState], label: Callable[[str, Mapping[str, Any]], str]
) -> list[LiveOperation]:
    """Operations still moving, awaiting a yes, or committed (undoable), with their true state."""
    return [
        LiveOperation(
            operation_id=op.operation_id,
            tool=op.tool,
            status=op.status.value,
            label=label(op.tool, op.arguments),
            arguments=dict(op.arguments),
        )
        for op in operations
        if op.status in _LIVE
    ]


def pending_updates(deliveries: Iterable[DeliveryState]) -> list[PendingUpdate]:
    """Closings that found no proactive window: they ride on this turn's reply.

    Only finals waiting on the gate (quiet, playback or next turn); one the policy handed
    over to be said now is the delivery executor's, and progress notes never ride.
    """
    return [
        PendingUpdate(delivery_id=d.delivery_id, text=d.text)
        for d in deliveries
        if d.kind == "final"
        and d.status is DeliveryStatus.WAITING
        and d.decision in WAITING_DECISIONS
        and not task_result(d.turn_id)
    ]


def reworded(
    reply: TurnReply,
    offered: Sequence[PendingUpdate],
    kept: Sequence[PendingUpdate],
    lang: str,
) -> TurnReply:
    """The model's reply, worded for the updates that really ride on it.

    The model words the updates it was offered before admission; one dropped since (made
    stale by this turn, or said elsewhere meanwhile) must not be in the text. Models put
    the shared preamble first, so it is swapped for the kept set's; a reply that worded the
    updates its own way cannot be cut safely, so its words give way to the preamble.
    """
    kept_ids = {u.delivery_id for u in kept}
    if all(u.delivery_id in kept_ids for u in offered):
        return reply
    lead = pending_preamble(offered, lang)
    text = reply.text.strip()
    if lead and text.startswith(lead):
        body = text[len(lead):]
    elif any(u.text.strip() and u.text.strip() in text for u in offered):
        body = ""
    else:
        body = text
    return replace(
        reply,
        text=join_text([pending_preamble(kept, lang), body]),
        attached=tuple(u.delivery_id for u in kept),
    )


def with_updates(text: str, updates: Sequence[PendingUpdate], mentioned: Iterable[str]) -> str:
    """The reply, followed by every attached update the model did not already word itself.

    The follow-up is guaranteed: an update rides on the reply whatever the model chose.
    """
    said = set(mentioned)
    extra = [u.text for u in updates if u.delivery_id not in said and u.text not in text]
    return " ".join(p for p in (text.strip(), *extra) if p)


def apology(language: str) -> str:
    """The honest answer when the model failed: nothing was started."""
    if language.startswith("es"):
        return (
            "Lo siento, ahora mismo no he podido procesar tu mensaje y no he puesto nada "
            "en marcha. ¿Puedes repetirlo en un momento?"
        )
    return (
        "Sorry, I could not process that just now, so I have not started anything. "
        "Could you say it again in a moment?"
    )


def fallback_acceptance(notes: Sequence[AdmissionNote], language: str) -> str:
    """An acceptance that says what started and what did not, and claims nothing done."""
    spanish = language.startswith("es")
    joined = [n for n in notes if n.reason == ELSEWHERE]
    own = [n for n in notes if n.reason != ELSEWHERE]
    started = [n.label for n in own if n.status in ("admitted", "running") and not n.reason]
    waiting = [n for n in own if n.status == "awaiting_confirmation"]
    refused = [n for n in own if n.status == "rejected"]
    cancelling = [n.label for n in own if n.status == "cancel_requested"]
    parts: list[str] = []
    if started:
        items = ", ".join(started)
        parts.append(
            f"Me pongo con ello: {items}. Te aviso cuando esté listo."
            if spanish
            else f"I'm on it: {items}. I'll let you know when it's done."
        )
    parts.extend(
        note.prompt
        or (f"¿Confirmas {note.label}?" if spanish else f"Shall I go ahead with {note.label}?")
        for note in waiting
    )
    # Told in the other conversation only: no promise here.
    parts.extend(elsewhere_words(n, n.label, base_language(language)) for n in joined)
    for note in refused:
        why = note.reason or "rejected"
        parts.append(
            f"No puedo hacer {note.label} ({why})." if spanish
            else f"I can't do {note.label} ({why})."
        )
    if cancelling:
        items = ", ".join(cancelling)
        parts.append(
            f"He pedido cancelar {items}; te confirmo cuando sea firme." if spanish
            else f"I've asked to cancel {items}; I'll confirm once it's final."
        )
    return " ".join(parts) or (
        "Entendido." if spanish else "Understood."
    )
