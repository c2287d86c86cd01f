"""A deterministic model for demos and tests: same request in, same reply out.

It reads English and Spanish requests for the demo tools with small phrase readers
(`understanding`), answers status questions from the live operations only, and phrases
acceptances and failure explanations from templates. It never reads the clock.

Over 400 lines: one reader and one phrasing per demo tool, in two languages; it is a test
double of a language model, not part of the runtime's core (which knows no tool by name).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from . import understanding as u
from .interface import (
    AdmissionNote,
    LiveOperation,
    OperationOutcome,
    ProposedCall,
    TurnReply,
    TurnRequest,
    call_id,
)
from .phrasing import (
    TERMINAL,
    Lang,
    acceptance_message,
    join_items,
    join_text,
    pending_preamble,
    reply_language,
    status_report,
    status_words,
)

_SUCCESS = "committed"
# The restaurant a booking goes to when neither the turn nor the conversation names one.
DEFAULT_RESTAURANT = "casa-pepe"


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
}
_ALTERNATIVES_ES: dict[str, str] = {
    "over_limit": "puedo volver a intentar {items} en unos minutos, cuando se libere el límite",
    "backpressure": "puedo volver a intentar {items} en unos minutos, con menos carga",
    "forbidden": "un administrador puede conceder {items}; puedo abrirle la solicitud",
    "agent_not_allowed": "puedo pasarte con el agente que gestiona {items}",
    "invalid_arguments": "dime los datos corregidos de {items} y lo reintento",
    "cancelled": "si aún quieres {items}, pídemelo de nuevo",
}


def _cause(outcome: OperationOutcome) -> str:
    if outcome.status == "cancelled":
        return "cancelled"
    return outcome.detail.split(":", 1)[0].strip()


# -- reading a turn -------------------------------------------------------------------------


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# All patterns run on folded text (lowercase, no accents).
_CANCEL = _rx(
    r"\b(?:cancel|abort|stop|call off|never ?mind|(?:don'?t|do not) (?:do|make|send|book|"
    r"transfer|grant|give|pay)|cancela|cancelala|cancelalo|cancelalas|cancelalos|cancelar|"
    r"anula|anulala|anulalo|anular|deten|detenla|detenlo|no (?:la |lo |me |le |les )?"
    r"(?:hagas|envies|mandes|reserves|transfieras|des|pagues))\b"
)
_UNDO = _rx(
    r"\b(?:undo|revert|roll ?back|revoke|remove (?:my |the )?access|take away|deshaz|deshazlo|"
    r"deshazla|deshacer|revierte|revertir|revoca|revocame|revocar|quita|quitame|quitar|"
    r"retira|retirame)\b"
)
_WEAK_CANCEL = _rx(r"\b(?:forget(?: about)?|i don'?t want|no quiero|ya no quiero|olvida\w*)\b")
_ALL = _rx(r"\b(?:everything|all of (?:it|them)|all|todo|todas|todos)\b")
_STATUS = _rx(
    r"\b(?:how(?:'?s| is| are)? (?:it|things|everything|that|my \w+|the \w+)? ?going|"
    r"how are we doing|status|progress|any (?:news|updates?)|what'?s happening|"
    r"what(?:'?s| is) going on|is it (?:done|ready|finished)|are (?:they|we|you) "
    r"(?:done|ready|finished)|where are we|update me|did it work|como va\w*|como vamos|"
    r"que tal va\w*|estado|novedades|ya esta|ya estan|en que (?:va|esta|punto)|"
    r"como lo llevas|ha terminado|han terminado|se ha hecho|"
    r"(?:se ha|ha sido|han sido|fue|esta|estan) (?:cancelad|hech|confirmad|reservad|concedid)\w*|"
    r"(?:was|is|has|have|were|are) (?:it|that|they|the \w+|my \w+) (?:been )?"
    r"(?:cancell?ed|confirmed|booked|granted|done|sent|finished))\b"
)
_WAIT = _rx(
    r"^(?:wait|hold on|hang on|one (?:sec|second|moment)|just a (?:sec|second|moment)|"
    r"espera\w*|un momento|un segundo|momento)\b"
)
# Whole first phrases, words joined by "_" (see _first_phrase).
_YES = u.word_set(
    "yes yeah yep yup sure ok okay confirm confirmed i_confirm go_ahead do_it yes_do_it "
    "yes_go_ahead correct si vale claro confirmo confirmado confirmada adelante hazlo hazla "
    "de_acuerdo si_adelante si_hazlo si_confirmo correcto"
)
_YES_LEAD = _rx(r"^(?:confirm|confirmo|confirma|confirmala|confirmalo|approve|apruebo)\b")
_NO = u.word_set(
    "no nope nah no_thanks no_thank_you no_gracias mejor_no not_now ahora_no don't dont"
)
_GREETING = _rx(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|hola|buenas|buenos dias)\b")
_THANKS = _rx(r"\b(?:thanks|thank you|gracias)\b")
_TRANSFER_VERB = _rx(
    r"\b(?:send|transfer|pay|wire|move|transfiere\w*|transferir|envia\w*|manda\w*|paga\w*|"
    r"transferencia|haz una transferencia)\b"
)
_TRANSFER_NOUN = _rx(r"\b(?:transfer|transfiere\w*|transferir|transferencia)\b")
_ACCESS_INTRO = (
    _rx(r"\b(?:access|accesses)\s+(?:to|for|on)\b\s*"),
    _rx(r"\b(?:grant|provision)\s+(?:me\s+|us\s+)?(?:access\s+(?:to\s+)?)?"),
    _rx(r"\badd me to\s+"),
    _rx(r"\baccesos?\s+(?:a|al|para|en|de)\b\s*"),
    _rx(r"\bpermisos?\s+(?:de|para|en|a)\b\s*"),
    _rx(r"\bdame de alta en\s+"),
)
_ACCESS_BEFORE = _rx(r"\b(?:give me|i need|i want|get me)\s+(.+?)\s+access\b")
_AVAILABILITY = _rx(
    r"\b(?:free|available|availability|any tables?|have (?:a )?(?:table|room)|libre|"
    r"disponible|disponibilidad|hay (?:mesa|sitio)|tiene(?: \w+){0,3} (?:mesa|sitio)|hueco)\b"
)
_BOOKING = _rx(r"\b(?:book|reserve|reservation|table for|reserva\w*|mesa para)\b")
_CHANGE = _rx(
    r"\b(?:make it|change (?:it|the booking|the reservation|that)|move (?:it|the booking|the "
    r"reservation)|instead|actually|better at|rather|reschedule|switch (?:it )?to|mejor|cambia\w*|"
    r"mueve\w*|en vez de|en lugar de|pasala|pasalo)\b"
)
_TOOL_WORDS: dict[str, frozenset[str]] = {
    "transfer_money": u.word_set(
        "transfer transfers transferencia transferencias payment pago money dinero wire"
    ),
    "book_table": u.word_set(
        "booking bookings reservation reservations table reserva reservas mesa dinner cena "
        "restaurant restaurante"
    ),
    "provision_access": u.word_set(
        "access accesses acceso accesos permiso permisos permission permissions"
    ),
    "check_availability": u.word_set("availability disponibilidad"),
}


def _tool_words(tool: str) -> frozenset[str]:
    known = _TOOL_WORDS.get(tool)
    if known is not None:
        return known
    return frozenset(w for w in tool.split("_") if len(w) >= 4)


def _names_of(op: LiveOperation) -> set[str]:
    names = {u.normalise_name(op.label)} if op.label else set()
    for value in op.arguments.values():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str) and len(item) >= 3 and not item.isdigit():
                names.add(u.normalise_name(item))
    return {n for n in names if n}


def _first_phrase(folded: str) -> str:
    """`Yes, please, the transfer` → `yes` (words joined by `_`, as in _YES and _NO)."""
    head = re.split(r"[,.;!?]", folded.strip(" ¿¡"), maxsplit=1)[0]
    head = re.sub(r"\b(?:please|por favor)\b", " ", head)
    return "_".join(head.split())


def _at(call: tuple[int, str, dict[str, Any]]) -> int:
    return call[0]


@dataclass(slots=True)
class _Targets:
    operations: list[LiveOperation]
    # How they were found: named, tool, all, only (the single candidate), none.
    how: str


@dataclass(slots=True)
class _Reader:
    request: TurnRequest
    lang: Lang
    today: date | None
    parts: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    confirmations: list[tuple[str, bool]] = field(default_factory=list)
    compensations: list[str] = field(default_factory=list)
    understood: bool = False
    bare_yes: bool = False
    # Calls of the clause being read, with where they were asked (to keep the user's order).
    pending_calls: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)

    @property
    def es(self) -> bool:
        return self.lang == "es"

    def say(self, en: str, es: str) -> None:
        self.parts.append(es if self.es else en)

    # -- the turn ---------------------------------------------------------------------------
    def reply(self) -> TurnReply:
        text = self.request.user_text
        for clause in u.split_clauses(text) or [text]:
            self.clause(clause)
        if not self.understood:
            self.small_talk(u.fold(text))
        pending = self.request.pending_updates
        calls = tuple(
            ProposedCall(tool, args, call_id(self.request.turn_id, i))
            for i, (tool, args) in enumerate(self.calls)
        )
        return TurnReply(
            text=join_text([pending_preamble(pending, self.lang), *self.parts]),
            calls=calls,
            cancels=tuple(dict.fromkeys(self.cancels)),
            confirmations=tuple(dict.fromkeys(self.confirmations)),
            compensations=tuple(dict.fromkeys(self.compensations)),
            attached=tuple(p.delivery_id for p in pending),
        )

    def clause(self, clause: str) -> None:
        folded = u.fold(clause).strip(" ¿¡")
        if self.stop(clause, folded) or self.status(clause, folded):
            self.understood = True
            return
        confirmed = self.yes(clause, folded)
        acted = self.tool_calls(clause, folded)
        if confirmed or acted:
            self.understood = True
            return
        if self.no(clause, folded) or self.wait(folded):
            self.understood = True

    # -- which operations a phrase is about ---------------------------------------------------
    def targets(self, clause: str, pool: Sequence[LiveOperation]) -> _Targets:
        words = u.tokens(clause)
        joined = f"-{'-'.join(words)}-"
        named = [op for op in pool if any(f"-{n}-" in joined for n in _names_of(op))]
        by_tool = [op for op in pool if _tool_words(op.tool) & set(words)]
        if named:
            both = [op for op in named if op in by_tool]
            return _Targets(both or named, "named")
        if by_tool:
            return _Targets(by_tool, "tool")
        if _ALL.search(u.fold(clause)):
            return _Targets(list(pool), "all")
        if len(pool) == 1:
            return _Targets(list(pool), "only")
        return _Targets([], "none")

    # -- explicit cancellation and undo -----------------------------------------------------
    def stop(self, clause: str, folded: str) -> bool:
        undo = bool(_UNDO.search(folded))
        strong = undo or bool(_CANCEL.search(folded))
        if not strong and not _WEAK_CANCEL.search(folded):
            return False
        ops = [
            op
            for op in self.request.live_operations
            if op.status not in TERMINAL or op.status == "committed"
        ]
        found = self.targets(clause, ops)
        if not strong and found.how not in {"named", "tool"}:
            return False
        if found.how == "only" and not undo and ops[0].status == "committed":
            # "cancel it" about the single finished operation: undo is what the user means.
            undo = True
        active = [op for op in found.operations if op.status not in TERMINAL]
        done = [op for op in found.operations if op.status == "committed"]
        if found.how == "none":
            self.ask_which(ops, undo=undo)
            return True
        if undo:
            self.cancels += [op.operation_id for op in active]
            self.compensations += [op.operation_id for op in done]
        elif active:
            self.cancels += [op.operation_id for op in active]
        else:
            # Cancelling what already went through means compensating it.
            self.compensations += [op.operation_id for op in done]
        if not found.operations:
            terminal = self.targets(clause, self.request.live_operations).operations
            if terminal and found.how in {"named", "tool"}:
                labels = [
                    f"{o.label or o.tool} ({status_words(o.status, self.lang)})" for o in terminal
                ]
                self.say(
                    f"There is nothing left to cancel: {join_items(labels, 'en')}.",
                    f"No queda nada que cancelar: {join_items(labels, 'es')}.",
                )
            else:
                self.say(
                    "There is nothing in progress to cancel.",
                    "No hay nada en marcha que cancelar.",
                )
        return True

    def ask_which(self, ops: Sequence[LiveOperation], *, undo: bool) -> None:
        if not ops:
            self.say(
                "There is nothing in progress to cancel or undo.",
                "No hay nada en marcha que cancelar o deshacer.",
            )
            return
        labels = join_items([op.label or op.tool for op in ops], self.lang)
        if undo:
            self.say(f"Which one should I undo: {labels}?", f"¿Cuál deshago: {labels}?")
        else:
            self.say(f"Which one should I cancel: {labels}?", f"¿Cuál cancelo: {labels}?")

    # -- questions about progress -----------------------------------------------------------
    def status(self, clause: str, folded: str) -> bool:
        if not _STATUS.search(folded):
            return False
        ops = list(self.request.live_operations)
        found = self.targets(clause, ops)
        shown = found.operations if found.how in {"named", "tool"} else ops
        self.parts.append(status_report(shown, self.lang))
        return True

    # -- yes / no to pending confirmations ---------------------------------------------------
    def awaiting(self) -> list[LiveOperation]:
        return [op for op in self.request.live_operations if op.status == "awaiting_confirmation"]

    def answer(self, clause: str, *, yes: bool) -> bool:
        awaiting = self.awaiting()
        if not awaiting:
            return False
        found = self.targets(clause, awaiting)
        chosen = found.operations if found.how in {"named", "tool"} else awaiting
        self.confirmations += [(op.operation_id, yes) for op in chosen]
        return True

    def yes(self, clause: str, folded: str) -> bool:
        if _first_phrase(folded) not in _YES and not _YES_LEAD.search(folded):
            return False
        if self.answer(clause, yes=True):
            return True
        self.bare_yes = True
        return False

    def no(self, clause: str, folded: str) -> bool:
        if _first_phrase(folded) not in _NO:
            return False
        if not self.answer(clause, yes=False):
            self.say("All right.", "De acuerdo.")
        return True

    def wait(self, folded: str) -> bool:
        if not _WAIT.search(folded):
            return False
        self.say(
            "Sure, take your time. Nothing is cancelled: what has started keeps going.",
            "Claro, tómate tu tiempo. No cancelo nada: lo que está en marcha sigue adelante.",
        )
        return True

    def small_talk(self, folded: str) -> None:
        if self.bare_yes:
            self.say(
                "There is nothing waiting for your confirmation right now.",
                "Ahora mismo no hay nada pendiente de tu confirmación.",
            )
        elif _GREETING.search(folded):
            self.say(
                "Hello! I can grant accesses, book or change a table, check availability and "
                "send transfers.",
                "¡Hola! Puedo dar accesos, reservar o cambiar una mesa, consultar disponibilidad "
                "y hacer transferencias.",
            )
        elif _THANKS.search(folded):
            self.say("You're welcome.", "De nada.")
        else:
            self.say(
                "Sorry, I didn't catch that. I can grant accesses (\"give me access to github "
                'and jira"), book or change a table, check availability, send transfers and '
                "tell you how things are going.",
                "Perdona, no lo he entendido. Puedo dar accesos («dame acceso a github y jira»), "
                "reservar o cambiar una mesa, consultar disponibilidad, hacer transferencias y "
                "contarte cómo va todo.",
            )

    # -- proposing tool calls ---------------------------------------------------------------
    def propose(self, tool: str, arguments: dict[str, Any], at: int) -> None:
        if any(spec.name == tool for spec in self.request.tools):
            self.pending_calls.append((at, tool, arguments))
        else:
            self.say(
                f"I can't use {tool} in this conversation.",
                f"No puedo usar {tool} en esta conversación.",
            )

    def tool_calls(self, clause: str, folded: str) -> bool:
        acted = self.transfer(clause, folded)
        acted = self.accesses(folded) or acted
        booking = _BOOKING.search(folded)
        if (m := _AVAILABILITY.search(folded)) and not booking:
            acted = self.availability(clause, m.start()) or acted
        elif (m := _CHANGE.search(folded)) and self.change(clause, m.start()):
            acted = True
        elif booking:
            acted = self.booking(clause, booking.start()) or acted
        self.calls += [(tool, args) for _, tool, args in sorted(self.pending_calls, key=_at)]
        self.pending_calls.clear()
        return acted

    def transfer(self, clause: str, folded: str) -> bool:
        verb = _TRANSFER_VERB.search(folded)
        if verb is None:
            return False
        amount = u.money(clause)
        if amount is None:
            if not _TRANSFER_NOUN.search(folded):
                return False
            self.say("How much should I transfer, and to whom?", "¿Cuánto transfiero y a quién?")
            return True
        to = u.recipient(clause, amount.end)
        if to is None:
            self.say("Who should I send it to?", "¿A quién se lo envío?")
            return True
        self.propose(
            "transfer_money",
            {
                "to_account": to,
                "amount_cents": amount.cents,
                "currency": amount.currency,
                "from_account": u.source_account(clause) or "main",
            },
            verb.start(),
        )
        return True

    def accesses(self, folded: str) -> bool:
        names: list[str] = []
        for intro in _ACCESS_INTRO:
            if m := intro.search(folded):
                names = u.name_list(folded[m.end() :])
                break
        else:
            m = _ACCESS_BEFORE.search(folded)
            if m is None:
                return False
            names = u.name_list(m.group(1))
        if not names:
            self.say("Access to which tools?", "¿Acceso a qué herramientas?")
            return True
        self.propose("provision_access", {"accesses": names}, m.start())
        return True

    # -- bookings and availability ----------------------------------------------------------
    def context(self) -> dict[str, Any]:
        """Restaurant and date the conversation is about: live operations, then history."""
        for op in reversed(self.request.live_operations):
            if op.tool in {"book_table", "check_availability"} and op.status not in {
                "rejected",
                "cancelled",
            }:
                return dict(op.arguments)
        for message in reversed(self.request.history):
            if message.role != "user":
                continue
            folded = u.fold(message.text)
            if not (_BOOKING.search(folded) or _AVAILABILITY.search(folded)):
                continue
            found: dict[str, Any] = {}
            if place := u.venue(message.text):
                found["restaurant"] = place
            reading = u.calendar_date(message.text, self.today)
            if reading and reading.day:
                found["date"] = reading.day
            if found:
                return found
        return {}

    def day(self, clause: str, context: dict[str, Any]) -> str | None:
        """The date of the clause, else of the context (if not past), else today."""
        reading = u.calendar_date(clause, self.today)
        if reading is not None and reading.day:
            return reading.day
        known = context.get("date")
        fresh = self.today is None or str(known) >= self.today.isoformat()
        if reading is None and isinstance(known, str) and fresh:
            return known
        if reading is None and self.today is not None:
            return self.today.isoformat()
        self.say(
            "For which date? (for example 2025-06-14)",
            "¿Para qué fecha? (por ejemplo 2025-06-14)",
        )
        return None

    def place_and_context(self, clause: str) -> tuple[str, dict[str, Any]]:
        """The restaurant named (else the one in context, else the demo default) and the
        context whose date applies: only the same restaurant's."""
        context = self.context()
        named = u.venue(clause)
        if named and named != context.get("restaurant"):
            return named, {}
        return named or context.get("restaurant") or DEFAULT_RESTAURANT, context

    def booking(self, clause: str, at: int) -> bool:
        restaurant, context = self.place_and_context(clause)
        time = u.clock_time(clause)
        if time is None:
            self.say(
                f"What time should I book {restaurant} for?",
                f"¿A qué hora reservo en {restaurant}?",
            )
            return True
        day = self.day(clause, context)
        if day is None:
            return True
        self.propose(
            "book_table",
            {
                "restaurant": restaurant,
                "date": day,
                "time": time,
                "party_size": u.party_size(clause) or 2,
            },
            at,
        )
        return True

    def base_booking(self) -> dict[str, Any] | None:
        """The booking a change refers to: the latest one, live or in the history."""
        for op in reversed(self.request.live_operations):
            if op.tool == "book_table" and op.status not in {"rejected", "cancelled"}:
                return dict(op.arguments)
        for message in reversed(self.request.history):
            if message.role == "user" and _BOOKING.search(u.fold(message.text)):
                time = u.clock_time(message.text)
                reading = u.calendar_date(message.text, self.today)
                day = reading.day if reading else self.today.isoformat() if self.today else None
                if time and day:
                    return {
                        "restaurant": u.venue(message.text) or DEFAULT_RESTAURANT,
                        "date": day,
                        "time": time,
                        "party_size": u.party_size(message.text) or 2,
                    }
        return None

    def change(self, clause: str, at: int) -> bool:
        time = u.clock_time(clause)
        size = u.party_size(clause)
        reading = u.calendar_date(clause, self.today)
        if time is None and size is None and (reading is None or reading.day is None):
            return False
        base = self.base_booking()
        if base is None:
            if _BOOKING.search(u.fold(clause)):
                return False  # a new booking phrased as a change: book it
            self.say("Which booking should I change?", "¿Qué reserva cambio?")
            return True
        changed = dict(base)
        if time:
            changed["time"] = time
        if size:
            changed["party_size"] = size
        if reading is not None and reading.day:
            changed["date"] = reading.day
        if place := u.venue(clause):
            changed["restaurant"] = place
        # A new call on the same restaurant and date: the application treats it as superseding.
        self.propose("book_table", changed, at)
        return True

    def availability(self, clause: str, at: int) -> bool:
        restaurant, context = self.place_and_context(clause)
        day = self.day(clause, context)
        if day is None:
            return True
        self.propose("check_availability", {"restaurant": restaurant, "date": day}, at)
        return True


class MockModel:
    """Deterministic conversation model: reads requests, phrases acceptances and summaries."""

    name = "mock"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Propose calls and explicit requests for one turn; same request, same reply."""
        reader = _Reader(request, reply_language(request), u.parse_today(request.today))
        return reader.reply()

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """The reply's text, then what admission did; never a claim of completion."""
        return acceptance_message(request, reply, notes)

    async def explain_failures(self, outcomes: Sequence[OperationOutcome], *, language: str) -> str:
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
            why = outcome.detail.split(":", 1)[-1].strip() or outcome.status.replace("_", " ")
            parts.append(
                f"No pude completar {outcome.label} ({why})."
                if spanish
                else f"I could not complete {outcome.label} ({why})."
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
