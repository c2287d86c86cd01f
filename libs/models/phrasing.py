"""Words every model shares: language choice, pending-update preamble, acceptance templates.

Nothing here may claim that an operation finished unless its status is `committed`: the
acceptance says what started, what was refused and what needs a yes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from libs.admission.plan_types import ELSEWHERE

from .interface import AdmissionNote, LiveOperation, PendingUpdate, TurnReply, TurnRequest

Lang = str  # "en" or "es"

_ES_CHARS = re.compile(r"[¿¡ñáéíóú]")
_WORDS = re.compile(r"[a-záéíóúüñ']+")


def _word_set(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ES_WORDS = _word_set(
    "dame acceso accesos reserva reservar mesa para las los mañana hoy mejor sí cómo como va "
    "hagas transfiere transferencia hola gracias espera favor quiero necesito el la y de en "
    "cancela deshaz está hay qué que una uno dos tres cuatro personas euros vale libre "
    "viernes sábado domingo lunes martes miércoles jueves noche tarde anula quita revoca "
    "envía manda adelante confirmo tal vamos novedades estado"
)
_EN_WORDS = _word_set(
    "give me access to book table for at tomorrow today the and is how going yes please "
    "cancel send transfer undo wait don't do make it hello hi thanks free on a of what's "
    "status with people two three four friday saturday sunday monday tuesday wednesday "
    "thursday tonight confirm revoke any news instead available check"
)


def detect_language(text: str) -> Lang | None:
    """`es` or `en` when the words say so clearly, else None."""
    lowered = text.lower()
    words = _WORDS.findall(lowered)
    spanish = sum(w in _ES_WORDS for w in words) + 2 * len(_ES_CHARS.findall(lowered))
    english = sum(w in _EN_WORDS for w in words)
    if spanish > english:
        return "es"
    if english > spanish:
        return "en"
    return None


def base_language(language: str) -> Lang:
    """The supported language a code maps to (`es-ES` → `es`); anything else is English."""
    return "es" if language.lower().startswith("es") else "en"


def reply_language(request: TurnRequest) -> Lang:
    """What the user wrote in, when clear; otherwise the session's language."""
    return detect_language(request.user_text) or base_language(request.language)


def join_items(items: Sequence[str], lang: Lang) -> str:
    """`a, b and c` / `a, b y c`."""
    if len(items) <= 1:
        return "".join(items)
    conj = "y" if lang == "es" else "and"
    return f"{', '.join(items[:-1])} {conj} {items[-1]}"


def sentence(text: str) -> str:
    """Text with closing punctuation."""
    text = text.strip()
    if text and text[-1] not in ".!?…":
        text += "."
    return text


def join_text(parts: Iterable[str]) -> str:
    """Non-empty parts, one space apart."""
    return " ".join(p.strip() for p in parts if p and p.strip())


def pending_preamble(updates: Sequence[PendingUpdate], lang: Lang) -> str:
    """The mention of results not yet told, said before anything else this turn."""
    if not updates:
        return ""
    lead = "Antes de nada:" if lang == "es" else "Before that:"
    return join_text([lead, *(sentence(u.text) for u in updates)])


_STATUS_EN = {
    "requested": "requested",
    "admitted": "started",
    "running": "in progress",
    "failed_retryable": "in progress (retrying after a temporary failure)",
    "unknown": "being checked with the provider",
    "awaiting_confirmation": "waiting for your confirmation",
    "cancel_requested": "cancellation requested",
    "committed": "confirmed by the provider",
    "failed_final": "failed",
    "cancelled": "cancelled",
    "rejected": "not started",
}
_STATUS_ES = {
    "requested": "solicitado",
    "admitted": "en marcha",
    "running": "en curso",
    "failed_retryable": "en curso (reintentando tras un fallo temporal)",
    "unknown": "comprobándolo con el proveedor",
    "awaiting_confirmation": "esperando tu confirmación",
    "cancel_requested": "cancelación solicitada",
    "committed": "confirmado por el proveedor",
    "failed_final": "falló",
    "cancelled": "cancelado",
    "rejected": "no se inició",
}
TERMINAL_STATUSES = frozenset({"committed", "failed_final", "cancelled", "rejected"})


def status_words(status: str, lang: Lang) -> str:
    """An operation status as the user hears it."""
    table = _STATUS_ES if lang == "es" else _STATUS_EN
    return table.get(status, status.replace("_", " "))


def status_report(operations: Sequence[LiveOperation], lang: Lang) -> str:
    """Where each live operation stands, straight from its status."""
    es = lang == "es"
    if not operations:
        return "Ahora mismo no hay nada en marcha." if es else "Nothing is in progress right now."
    lines = [f"{op.label or op.tool}: {status_words(op.status, lang)}" for op in operations]
    head = "Así va todo:" if es else "Here is where things stand:"
    parts = [head, "; ".join(lines) + "."]
    if any(op.status not in TERMINAL_STATUSES for op in operations):
        parts.append(
            "Te aviso en cuanto tenga el resultado."
            if es
            else "I'll tell you as soon as there is a result."
        )
    return join_text(parts)


_REASONS_EN = {
    "unknown_tool": "that is not something I can do here",
    "invalid_arguments": "some of the details are not valid",
    "forbidden": "you do not have permission for it",
    "agent_not_allowed": "this agent cannot do that",
    "over_limit": "it is over your limit",
    "backpressure": "the system is too busy right now",
    "duplicate": "the same request is already in place",
    "batch_too_large": "the request has too many items",
    "interrupted": "the request was cut off before it started, so nothing was done",
    "confirmation_declined": "you said no",
    "not_awaiting_confirmation": "it was not waiting for a confirmation",
    "not_cancellable": "it can no longer be cancelled",
    "not_committed": "it has not gone through",
    "not_compensable": "it cannot be undone",
    "unknown_operation": "I could not find it",
    "cancel_raced": "its state changed at that very moment; please ask again",
    "handled_elsewhere": "it is already being handled in another conversation of yours",
    "tool_unavailable": "the system that does it cannot be reached right now",
    "unknown_outcome": (
        "it was sent but the answer was lost, so I cannot tell whether it went through; "
        "I did not send it again"
    ),
}
_REASONS_ES = {
    "unknown_tool": "no es algo que pueda hacer aquí",
    "invalid_arguments": "algunos datos no son válidos",
    "forbidden": "no tienes permiso para ello",
    "agent_not_allowed": "este agente no puede hacerlo",
    "over_limit": "supera tu límite",
    "backpressure": "el sistema está saturado ahora mismo",
    "duplicate": "ya hay una petición igual en marcha",
    "batch_too_large": "la petición tiene demasiados elementos",
    "interrupted": "la petición se cortó antes de empezar, así que no se hizo nada",
    "confirmation_declined": "dijiste que no",
    "not_awaiting_confirmation": "no estaba esperando confirmación",
    "not_cancellable": "ya no se puede cancelar",
    "not_committed": "no se ha llegado a hacer",
    "not_compensable": "no se puede deshacer",
    "unknown_operation": "no la encuentro",
    "cancel_raced": "su estado cambió en ese mismo momento; pídemelo otra vez",
    "handled_elsewhere": "ya se está gestionando en otra conversación tuya",
    "tool_unavailable": "el sistema que lo hace no responde ahora mismo",
    "unknown_outcome": (
        "se envió pero se perdió la respuesta, así que no sé si se hizo; no lo he vuelto a enviar"
    ),
}
_ACTIVE = frozenset({"requested", "admitted", "running", "failed_retryable", "unknown"})


def reason_words(reason: str | None, status: str, lang: Lang) -> str:
    """Admission's reason (`code` or `code: detail`) in words; free text passes through."""
    if not reason:
        return status_words(status, lang)
    table = _REASONS_ES if lang == "es" else _REASONS_EN
    code, _, detail = reason.partition(":")
    words = table.get(code.strip())
    if words is None:
        return reason
    detail = detail.strip()
    return f"{words} ({detail})" if detail else words


def _kind(note: AdmissionNote, reply: TurnReply) -> str:
    # Explicit kinds win; callers that leave "call" still get the right words.
    if note.kind != "call":
        return note.kind
    if note.operation_id in reply.cancels or note.status == "cancel_requested":
        return "cancel"
    if any(op == note.operation_id for op, _ in reply.confirmations):
        return "confirmation"
    if reply.compensations and (
        note.operation_id in reply.compensations
        or note.tool not in {call.tool for call in reply.calls}
    ):
        return "compensation"
    return "call"


def _cancel_words(note: AdmissionNote, label: str, why: str, es: bool) -> str:
    if note.status == "cancel_requested" and not note.reason:
        return (
            f"He pedido cancelar {label}; te confirmo cuando esté cancelado de verdad."
            if es
            else f"I've asked to cancel {label}; I'll confirm once it is really cancelled."
        )
    if note.status == "committed":
        return (
            f"No pude cancelar {label}: ya se había realizado."
            if es
            else f"I couldn't cancel {label}: it had already gone through."
        )
    return (
        f"No pude cancelar {label} porque {why}."
        if es
        else f"I couldn't cancel {label} because {why}."
    )


def _confirmation_words(note: AdmissionNote, label: str, why: str, es: bool) -> str:
    if note.status in _ACTIVE and not note.reason:
        return f"Gracias. Empiezo con {label}." if es else f"Thanks. I'm starting {label}."
    if note.reason == "confirmation_declined" or note.status == "rejected":
        return f"De acuerdo, no haré {label}." if es else f"OK, I won't do {label}."
    return (
        f"No pude confirmar {label} porque {why}."
        if es
        else f"I couldn't confirm {label} because {why}."
    )


def _compensation_words(note: AdmissionNote, label: str, why: str, es: bool) -> str:
    if note.status in _ACTIVE and not note.reason:
        return f"He empezado a deshacer {label}." if es else f"I've started undoing {label}."
    return (
        f"No pude deshacer {label} porque {why}."
        if es
        else f"I couldn't undo {label} because {why}."
    )


def elsewhere_words(note: AdmissionNote, label: str, lang: Lang) -> str:
    """A repeat that joined another conversation's operation: its result is told there only,
    so this conversation is promised nothing."""
    es = lang == "es"
    if note.status == "committed":
        return (
            f"{label} ya estaba confirmado desde otra conversación tuya."
            if es
            else f"{label} was already confirmed from another conversation of yours."
        )
    if note.status in TERMINAL_STATUSES:
        state = status_words(note.status, lang)
        return (
            f"{label} se pidió en otra conversación tuya y terminó así: {state}."
            if es
            else f"{label} was asked for in another conversation of yours and ended: {state}."
        )
    return (
        f"{label} ya está en marcha desde otra conversación tuya; el resultado te llegará allí."
        if es
        else f"{label} is already under way from another conversation of yours; "
        "you will get the result there."
    )


def _call_words(note: AdmissionNote, label: str, why: str, lang: Lang) -> str | None:
    """One call's sentence; None when it simply started (those are grouped)."""
    es = lang == "es"
    if note.status == "awaiting_confirmation":
        # Admission's prompt is technical; only its "you did this before" warning is kept.
        repeat = "already" in (note.prompt or "").lower()
        if es:
            again = "Ya lo hiciste una vez. " if repeat else ""
            return f"{label} necesita tu confirmación. {again}¿Lo hago? (sí/no)"
        again = "You already did this once. " if repeat else ""
        return f"{label} needs your confirmation. {again}Shall I go ahead? (yes/no)"
    if (note.reason or "").partition(":")[0] == ELSEWHERE:
        return elsewhere_words(note, label, lang)
    if note.reason or note.status == "rejected":
        return (
            f"No pude iniciar {label} porque {why}."
            if es
            else f"I couldn't start {label} because {why}."
        )
    if note.existing and note.status == "committed":
        return (
            f"{label} ya estaba confirmado de antes."
            if es
            else f"{label} was already confirmed earlier."
        )
    if note.existing and note.status in _ACTIVE | {"cancel_requested"}:
        state = status_words(note.status, lang)
        return (
            f"{label} ya está en marcha ({state})."
            if es
            else f"{label} is already under way ({state})."
        )
    if note.status in _ACTIVE:
        return None
    return f"{label}: {status_words(note.status, lang)}."


def acceptance(reply: TurnReply, notes: Sequence[AdmissionNote], lang: Lang) -> str:
    """What admission did with each request, in order; never a claim of completion."""
    es = lang == "es"
    started: list[str] = []
    parts: list[str] = []

    def flush() -> None:
        if started:
            items = join_items(started, lang)
            parts.append(f"Me pongo con ello: {items}." if es else f"I'm on it: {items}.")
            started.clear()

    for note in notes:
        label = note.label or note.tool
        why = reason_words(note.reason, note.status, lang)
        match _kind(note, reply):
            case "cancel":
                said: str | None = _cancel_words(note, label, why, es)
            case "confirmation":
                said = _confirmation_words(note, label, why, es)
            case "compensation":
                said = _compensation_words(note, label, why, es)
            case _:
                said = _call_words(note, label, why, lang)
        if said is None:
            started.append(label)
        else:
            flush()
            parts.append(said)
    flush()
    if any(n.status in _ACTIVE and not n.reason for n in notes):
        parts.append(
            "Te aviso en cuanto tenga el resultado."
            if es
            else "I'll let you know as soon as I have the result."
        )
    return join_text(parts)


def acceptance_message(
    request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
) -> str:
    """`reply.text` followed by the acceptance, in the turn's language."""
    lang = reply_language(request)
    said = acceptance(reply, notes, lang)
    if not said and not reply.text:
        said = "De acuerdo." if lang == "es" else "All right."
    return join_text([reply.text, said])
