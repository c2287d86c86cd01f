"""The core's own words when no conversation model is configured: closings from templates.

`explain_from_templates` words a batch's failures (what worked, what did not and why, and a
next step per cause) in English or Spanish; the coordinator falls back to it when its model
fails, and the demo's mock model uses it too. `TemplateModel` is the model a production
deployment runs with no `HOLDLINE_MODEL` and no OpenAI key: it phrases closings and
acceptances, and refuses chat turns (`NoModelConfigured`; the surface answers 503).
"""

from __future__ import annotations

from collections.abc import Sequence

from .interface import AdmissionNote, ModelError, OperationOutcome, TurnReply, TurnRequest
from .phrasing import acceptance_message

_SUCCESS = "committed"



def _join(items: Sequence[str], conjunction: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


# The alternative offered per failure cause: a next step the user can take, not an apology.
_ALTERNATIVES_EN: dict[str, str] = {
    "over_limit": "I can try {items} again in a few minutes, when the limit frees up",
    "backpressure": "I can try {items} again in a few minutes, when the system is less busy",
    "forbidden": "an administrator can grant {items}; I can open that request for you",
    "agent_not_allowed": "I can hand you to the agent that handles {items}",
    "invalid_arguments": "tell me the corrected details for {items} and I will retry",
    "cancelled": "if you still want {items}, ask me again",
    "unknown_outcome": "check whether {items} went through before you ask me again",
}
_ALTERNATIVES_ES: dict[str, str] = {
    "over_limit": "puedo volver a intentar {items} en unos minutos, cuando se libere el límite",
    "backpressure": "puedo volver a intentar {items} en unos minutos, con menos carga",
    "forbidden": "un administrador puede conceder {items}; puedo abrirle la solicitud",
    "agent_not_allowed": "puedo pasarte con el agente que gestiona {items}",
    "invalid_arguments": "dime los datos corregidos de {items} y lo reintento",
    "cancelled": "si aún quieres {items}, pídemelo de nuevo",
    "unknown_outcome": "comprueba si {items} se hizo antes de pedírmelo otra vez",
}


def _cause(outcome: OperationOutcome) -> str:
    if outcome.status == "cancelled":
        return "cancelled"
    return outcome.detail.split(":", 1)[0].strip()


def explain_from_templates(outcomes: Sequence[OperationOutcome], *, language: str) -> str:
    """What worked, what did not and why, and what the user can do next."""
    spanish = language.lower().startswith("es")
    done = [o.label for o in outcomes if o.status == _SUCCESS]
    failed = [o for o in outcomes if o.status != _SUCCESS]
    conj = "y" if spanish else "and"
    parts: list[str] = []
    if done:
        parts.append(
            f"Hecho: {_join(done, conj)}." if spanish else f"Done: {_join(done, conj)}."
        )
    for outcome in failed:
        if _cause(outcome) == "unknown_outcome" and not outcome.line:
            # Sent, the answer lost, nothing to look it up with: neither done nor failed.
            parts.append(
                f"Envié {outcome.label}, pero se perdió la respuesta: no sé si se hizo, "
                "y no lo he vuelto a enviar."
                if spanish
                else f"I sent {outcome.label}, but the answer was lost: I cannot tell "
                "whether it went through, and I did not send it again."
            )
            continue
        why = outcome.detail.split(":", 1)[-1].strip() or outcome.status.replace("_", " ")
        parts.append(
            outcome.line
            or (
                f"No pude completar {outcome.label} ({why})."
                if spanish
                else f"I could not complete {outcome.label} ({why})."
            )
        )
    causes: dict[str, list[str]] = {}
    for outcome in failed:
        causes.setdefault(_cause(outcome), []).append(outcome.label)
    table = _ALTERNATIVES_ES if spanish else _ALTERNATIVES_EN
    default = (
        "puedo reintentar {items} ahora mismo o dejarlo como está; dime qué prefieres"
        if spanish
        else "I can retry {items} right now, or leave it as it is; just say which"
    )
    for cause, labels in causes.items():
        alternative = table.get(cause, default).format(items=_join(labels, conj))
        label = "Alternativa" if spanish else "Alternative"
        parts.append(f"{label}: {alternative}.")
    return " ".join(parts)


class NoModelConfigured(ModelError):
    """A chat turn reached a deployment that configures no conversation model."""


# What a refused turn says (the surface's problem+json detail).
NO_MODEL_HINT = (
    "no conversation model is configured: set HOLDLINE_MODEL (or OPENAI_API_KEY); "
    "closings are still worded from templates"
)


class TemplateModel:
    """No model configured: closings and acceptances from templates, chat turns refused."""

    name = "none"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Refused: a turn needs a configured model."""
        raise NoModelConfigured(NO_MODEL_HINT)

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """The reply's text, then what admission did."""
        return acceptance_message(request, reply, notes)

    async def explain_failures(self, outcomes: Sequence[OperationOutcome], *, language: str) -> str:
        """The template explanation (`explain_from_templates`)."""
        return explain_from_templates(outcomes, language=language)
