"""How the mock model reads a turn: clause by clause, into calls, cancellations,
confirmations, undos and the words it says back. Deterministic; `today` is a parameter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from libs.models.interface import LiveOperation, ProposedCall, TurnReply, TurnRequest, call_id
from libs.models.phrasing import (
    TERMINAL_STATUSES,
    Lang,
    join_items,
    join_text,
    pending_preamble,
    status_report,
    status_words,
)

from . import mock_bookings as bookings
from . import understanding as u
from .mock_bookings import Ask, Proposal
from .mock_explicit import explicit_call
from .mock_phrases import (
    ACCESS_BEFORE_RE,
    ACCESS_INTROS,
    ALL_RE,
    AVAILABILITY_RE,
    BOOKING_RE,
    CANCEL_RE,
    CHANGE_RE,
    GREETING_RE,
    NO_PHRASES,
    STATUS_RE,
    THANKS_RE,
    TRANSFER_NOUN_RE,
    TRANSFER_VERB_RE,
    UNDO_RE,
    WAIT_RE,
    WEAK_CANCEL_RE,
    YES_LEAD_RE,
    YES_PHRASES,
    first_phrase,
    names_of,
    tool_words,
)
from .understanding_names import read_names


def _at(call: tuple[int, str, dict[str, Any]]) -> int:
    return call[0]


@dataclass(slots=True)
class _Targets:
    operations: list[LiveOperation]
    # How they were found: named, tool, all, only (the single candidate), none.
    how: str


@dataclass(slots=True)
class TurnReader:
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
        if (explicit := explicit_call(text, self.request.tools)) is not None:
            self.calls.append(explicit)
            self.understood = True
        for clause in () if explicit else u.split_clauses(text) or [text]:
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
        named = [op for op in pool if any(f"-{n}-" in joined for n in names_of(op))]
        by_tool = [op for op in pool if tool_words(op.tool) & set(words)]
        if named:
            both = [op for op in named if op in by_tool]
            return _Targets(both or named, "named")
        if by_tool:
            return _Targets(by_tool, "tool")
        if ALL_RE.search(u.fold(clause)):
            return _Targets(list(pool), "all")
        if len(pool) == 1:
            return _Targets(list(pool), "only")
        return _Targets([], "none")

    # -- explicit cancellation and undo -----------------------------------------------------
    def stop(self, clause: str, folded: str) -> bool:
        undo = bool(UNDO_RE.search(folded))
        strong = undo or bool(CANCEL_RE.search(folded))
        if not strong and not WEAK_CANCEL_RE.search(folded):
            return False
        ops = [
            op
            for op in self.request.live_operations
            if op.status not in TERMINAL_STATUSES or op.status == "committed"
        ]
        found = self.targets(clause, ops)
        if not strong and found.how not in {"named", "tool"}:
            return False
        if found.how == "only" and not undo and ops[0].status == "committed":
            # "cancel it" about the single finished operation: undo is what the user means.
            undo = True
        active = [op for op in found.operations if op.status not in TERMINAL_STATUSES]
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
        if not STATUS_RE.search(folded):
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
        if first_phrase(folded) not in YES_PHRASES and not YES_LEAD_RE.search(folded):
            return False
        if self.answer(clause, yes=True):
            return True
        self.bare_yes = True
        return False

    def no(self, clause: str, folded: str) -> bool:
        if first_phrase(folded) not in NO_PHRASES:
            return False
        if not self.answer(clause, yes=False):
            self.say("All right.", "De acuerdo.")
        return True

    def wait(self, folded: str) -> bool:
        if not WAIT_RE.search(folded):
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
        elif GREETING_RE.search(folded):
            self.say(
                "Hello! I can grant accesses, book or change a table, check availability and "
                "send transfers.",
                "¡Hola! Puedo dar accesos, reservar o cambiar una mesa, consultar disponibilidad "
                "y hacer transferencias.",
            )
        elif THANKS_RE.search(folded):
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
    def act(self, found: Proposal | Ask, at: int) -> bool:
        """Propose the call found, or ask the question that stands in for it."""
        if isinstance(found, Ask):
            self.say(found.en, found.es)
        else:
            self.propose(*found, at)
        return True

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
        booking = BOOKING_RE.search(folded)
        request, today = self.request, self.today
        if (m := AVAILABILITY_RE.search(folded)) and not booking:
            acted = self.act(bookings.availability(request, today, clause), m.start()) or acted
        elif (m := CHANGE_RE.search(folded)) and (
            changed := bookings.change(request, today, clause)
        ) is not None:
            acted = self.act(changed, m.start())
        elif booking:
            acted = self.act(bookings.booking(request, today, clause), booking.start()) or acted
        self.calls += [(tool, args) for _, tool, args in sorted(self.pending_calls, key=_at)]
        self.pending_calls.clear()
        return acted

    def transfer(self, clause: str, folded: str) -> bool:
        verb = TRANSFER_VERB_RE.search(folded)
        if verb is None:
            return False
        amount = u.money(clause)
        if amount is None:
            if not TRANSFER_NOUN_RE.search(folded):
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
        unclear: list[str] = []
        for intro in ACCESS_INTROS:
            if m := intro.search(folded):
                names, unclear = read_names(folded[m.end() :])
                break
        else:
            m = ACCESS_BEFORE_RE.search(folded)
            if m is None:
                return False
            names, unclear = read_names(m.group(1))
        if unclear:
            # "the repo" with no name: asked, never guessed (nothing is proposed).
            kind = unclear[0]
            self.say(
                f"Which {kind} do you mean? Tell me its name, like \"the {kind} named "
                "data-pipeline\".",
                f"¿Qué {kind}? Dime su nombre, por ejemplo \"el {kind} llamado data-pipeline\".",
            )
            return True
        if not names:
            self.say("Access to which tools?", "¿Acceso a qué herramientas?")
            return True
        self.propose("provision_access", {"accesses": names}, m.start())
        return True
