"""Deterministic readers of times and dates in English and Spanish (`9pm`, `a las 9 y media`,
`tomorrow`, `el viernes`, `14 de junio`). `today` is a parameter: nothing here reads the clock."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, timedelta

from .understanding import fold

# -- times ---------------------------------------------------------------------------------

_HHMM = re.compile(r"(?<![\d.,])([01]?\d|2[0-3])[:.h]([0-5]\d)(?![\d.,]?\d)")
_AMPM = re.compile(r"\b(1[0-2]|0?[1-9])(?::([0-5]\d))?\s*(am|pm|a\.m\.|p\.m\.)")
_A_LAS = re.compile(
    r"\b(?:a las|a la|sobre las|para las)\s+(\d{1,2})(?::([0-5]\d))?"
    r"(?:\s+y\s+(media|cuarto))?(?:\s+de la\s+(noche|tarde|manana))?"
)
_HOURS = re.compile(r"\b([01]?\d|2[0-3])\s*h\b")
_AT = re.compile(r"\b(?:at|around)\s+(\d{1,2})\b(?!\s*(?:people|persons|guests|:|\.\d))")


def _clock(hour: int, minute: int) -> str | None:
    if 0 <= hour <= 23 and 0 <= minute <= 59:
        return f"{hour:02d}:{minute:02d}"
    return None


def clock_time(text: str) -> str | None:
    """`21:30`, `21.30`, `9pm`, `9:30 pm`, `a las 9 y media de la noche`, `21h` → HH:MM."""
    folded = fold(text)
    if m := _HHMM.search(folded):
        return _clock(int(m.group(1)), int(m.group(2)))
    if m := _AMPM.search(folded):
        hour = int(m.group(1)) % 12 + (12 if m.group(3).startswith("p") else 0)
        return _clock(hour, int(m.group(2) or 0))
    if m := _A_LAS.search(folded):
        hour = int(m.group(1))
        minute = int(m.group(2) or 0)
        if m.group(3):
            minute = 30 if m.group(3) == "media" else 15
        if m.group(4) in {"noche", "tarde"} and hour < 12:
            hour += 12
        return _clock(hour, minute)
    if m := _HOURS.search(folded):
        return _clock(int(m.group(1)), 0)
    if m := _AT.search(folded):
        return _clock(int(m.group(1)), 0)
    return None


# -- dates ---------------------------------------------------------------------------------

WEEKDAYS = {
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5,
    "sunday": 6, "lunes": 0, "martes": 1, "miercoles": 2, "jueves": 3, "viernes": 4,
    "sabado": 5, "domingo": 6,
}  # fmt: skip
MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "enero": 1, "febrero": 2, "marzo": 3, "abril": 4, "mayo": 5, "junio": 6, "julio": 7,
    "agosto": 8, "septiembre": 9, "setiembre": 9, "octubre": 10, "noviembre": 11,
    "diciembre": 12,
}  # fmt: skip
_MONTH_RE = "|".join(MONTHS)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:de\s+|of\s+)?({_MONTH_RE})\b")
_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b")
_SLASH = re.compile(r"\b(\d{1,2})/(\d{1,2})(?:/(\d{4}))?\b")
_DAY_ONLY = re.compile(r"\b(?:el dia|el|on the|the)\s+(\d{1,2})(?:st|nd|rd|th)?\b(?!\s*[:.h]\d)")
_WEEKDAY = re.compile(
    r"\b(next\s+|this\s+|el proximo\s+|proximo\s+|este\s+|el\s+)?("
    + "|".join(WEEKDAYS)
    + r")(\s+que viene)?\b"
)
_AFTER_TOMORROW = re.compile(r"\b(?:pasado manana|the day after tomorrow)\b")
# "mañana" is tomorrow unless it is the morning ("por la mañana", "de la mañana").
_TOMORROW = re.compile(r"\btomorrow\b|(?<!la )(?<!las )\bmanana\b")
_TODAY = re.compile(r"\b(?:today|tonight|this evening|hoy|esta noche|esta tarde)\b")


@dataclass(frozen=True, slots=True)
class DateReading:
    """A date found in a text: the ISO day, or None when it needs `today` we do not have."""

    day: str | None
    needs_today: bool = False


def _iso(value: date) -> str:
    return value.isoformat()


def _future(today: date, month: int, day: int, year: int | None = None) -> date | None:
    try:
        found = date(year or today.year, month, day)
    except ValueError:
        return None
    if year is None and found < today:
        try:
            found = date(today.year + 1, month, day)
        except ValueError:
            return None
    return found


def parse_today(today: str | None) -> date | None:
    """The request's `today`, or None when absent or malformed."""
    if not today:
        return None
    try:
        return date.fromisoformat(today)
    except ValueError:
        return None


def calendar_date(text: str, today: date | None) -> DateReading | None:
    """The date a phrase names (`tomorrow`, `el viernes`, `14 de junio`, `2025-06-14`)."""
    folded = fold(text)
    if m := _ISO.search(folded):
        try:
            return DateReading(_iso(date(int(m.group(1)), int(m.group(2)), int(m.group(3)))))
        except ValueError:
            return None
    relative: date | None = None
    found = False
    if _AFTER_TOMORROW.search(folded):
        found = True
        relative = today + timedelta(days=2) if today else None
    elif _TOMORROW.search(folded):
        found = True
        relative = today + timedelta(days=1) if today else None
    elif _TODAY.search(folded):
        found = True
        relative = today
    elif m := _WEEKDAY.search(folded):
        found = True
        if today:
            ahead = (WEEKDAYS[m.group(2)] - today.weekday()) % 7
            explicit_next = (m.group(1) or "").strip() in {"next", "el proximo", "proximo"}
            if ahead == 0 and (explicit_next or m.group(3)):
                ahead = 7
            relative = today + timedelta(days=ahead)
    elif m := _DAY_MONTH.search(folded):
        found = True
        relative = _future(today, MONTHS[m.group(2)], int(m.group(1))) if today else None
    elif m := _MONTH_DAY.search(folded):
        found = True
        relative = _future(today, MONTHS[m.group(1)], int(m.group(2))) if today else None
    elif m := _SLASH.search(folded):
        found = True
        year = int(m.group(3)) if m.group(3) else None
        if today or year:
            base = today or date(year or 1970, 1, 1)
            relative = _future(base, int(m.group(2)), int(m.group(1)), year)
    elif m := _DAY_ONLY.search(folded):
        found = True
        if today:
            relative = _future(today, today.month, int(m.group(1)))
            if relative is not None and relative.month != today.month and relative < today:
                relative = None
            if relative is None or relative < today:
                month = today.month % 12 + 1
                year = today.year + (1 if month == 1 else 0)
                relative = _future(today, month, int(m.group(1)), year)
    if not found:
        return None
    if relative is None:
        return DateReading(None, needs_today=today is None)
    return DateReading(_iso(relative))
