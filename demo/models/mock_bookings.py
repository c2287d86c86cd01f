"""How the mock model reads bookings, changes and availability questions (pure).

Each reader returns the call to propose, or the question to ask instead (`Ask`); the
restaurant and date a turn leaves out come from the live operations, then the history.
`today` is a parameter: nothing here reads the clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from libs.models.interface import TurnRequest

from . import understanding as u
from .mock_phrases import AVAILABILITY_RE, BOOKING_RE
from .understanding_dates import calendar_date, clock_time
from .understanding_names import venue

# The restaurant a booking goes to when neither the turn nor the conversation names one.
DEFAULT_RESTAURANT = "casa-pepe"

# A call the mock proposes: the tool and its arguments.
Proposal = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Ask:
    """A question put back to the user instead of a call, in English and Spanish."""

    en: str
    es: str


def _context(request: TurnRequest, today: date | None) -> dict[str, Any]:
    """Restaurant and date the conversation is about: live operations, then history."""
    for op in reversed(request.live_operations):
        if op.tool in {"book_table", "check_availability"} and op.status not in {
            "rejected",
            "cancelled",
        }:
            return dict(op.arguments)
    for message in reversed(request.history):
        if message.role != "user":
            continue
        folded = u.fold(message.text)
        if not (BOOKING_RE.search(folded) or AVAILABILITY_RE.search(folded)):
            continue
        found: dict[str, Any] = {}
        if place := venue(message.text):
            found["restaurant"] = place
        reading = calendar_date(message.text, today)
        if reading and reading.day:
            found["date"] = reading.day
        if found:
            return found
    return {}


def _day(today: date | None, clause: str, context: dict[str, Any]) -> str | Ask:
    """The date of the clause, else of the context (if not past), else today."""
    reading = calendar_date(clause, today)
    if reading is not None and reading.day:
        return reading.day
    known = context.get("date")
    fresh = today is None or str(known) >= today.isoformat()
    if reading is None and isinstance(known, str) and fresh:
        return known
    if reading is None and today is not None:
        return today.isoformat()
    return Ask(
        "For which date? (for example 2025-06-14)",
        "¿Para qué fecha? (por ejemplo 2025-06-14)",
    )


def _place_and_context(
    request: TurnRequest, today: date | None, clause: str
) -> tuple[str, dict[str, Any]]:
    """The restaurant named (else the one in context, else the demo default) and the
    context whose date applies: only the same restaurant's."""
    context = _context(request, today)
    named = venue(clause)
    if named and named != context.get("restaurant"):
        return named, {}
    return named or context.get("restaurant") or DEFAULT_RESTAURANT, context


def booking(request: TurnRequest, today: date | None, clause: str) -> Proposal | Ask:
    """A new booking: restaurant, date, time and party size (2 unless said)."""
    restaurant, context = _place_and_context(request, today, clause)
    time = clock_time(clause)
    if time is None:
        return Ask(
            f"What time should I book {restaurant} for?",
            f"¿A qué hora reservo en {restaurant}?",
        )
    day = _day(today, clause, context)
    if isinstance(day, Ask):
        return day
    return (
        "book_table",
        {
            "restaurant": restaurant,
            "date": day,
            "time": time,
            "party_size": u.party_size(clause) or 2,
        },
    )


def _base_booking(request: TurnRequest, today: date | None) -> dict[str, Any] | None:
    """The booking a change refers to: the latest one, live or in the history."""
    for op in reversed(request.live_operations):
        if op.tool == "book_table" and op.status not in {"rejected", "cancelled"}:
            return dict(op.arguments)
    for message in reversed(request.history):
        if message.role == "user" and BOOKING_RE.search(u.fold(message.text)):
            time = clock_time(message.text)
            reading = calendar_date(message.text, today)
            day = reading.day if reading else today.isoformat() if today else None
            if time and day:
                return {
                    "restaurant": venue(message.text) or DEFAULT_RESTAURANT,
                    "date": day,
                    "time": time,
                    "party_size": u.party_size(message.text) or 2,
                }
    return None


def change(request: TurnRequest, today: date | None, clause: str) -> Proposal | Ask | None:
    """A change to the latest booking; None when the clause changes nothing after all."""
    time = clock_time(clause)
    size = u.party_size(clause)
    reading = calendar_date(clause, today)
    if time is None and size is None and (reading is None or reading.day is None):
        return None
    base = _base_booking(request, today)
    if base is None:
        if BOOKING_RE.search(u.fold(clause)):
            return None  # a new booking phrased as a change: book it
        return Ask("Which booking should I change?", "¿Qué reserva cambio?")
    changed = dict(base)
    if time:
        changed["time"] = time
    if size:
        changed["party_size"] = size
    if reading is not None and reading.day:
        changed["date"] = reading.day
    if place := venue(clause):
        changed["restaurant"] = place
    # A new call on the same restaurant and date: the application treats it as superseding.
    return ("book_table", changed)


def availability(request: TurnRequest, today: date | None, clause: str) -> Proposal | Ask:
    """An availability check for a restaurant on a date."""
    restaurant, context = _place_and_context(request, today, clause)
    day = _day(today, clause, context)
    if isinstance(day, Ask):
        return day
    return ("check_availability", {"restaurant": restaurant, "date": day})
