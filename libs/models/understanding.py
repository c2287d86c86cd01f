"""Small, deterministic readers of English and Spanish phrases: names, lists, dates, times,
party sizes and amounts. The mock model is built from them; nothing here reads the clock.

Just over 400 lines: the readers share their word lists and number parsing in two
languages; split, each part would import the others' tables."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from datetime import date, timedelta

RESOURCE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def normalise_name(value: str) -> str:
    """`Casa Pepé` → `casa-pepe`: the resource-name form admission also produces."""
    decomposed = unicodedata.normalize("NFKD", value)
    ascii_only = "".join(c for c in decomposed if not unicodedata.combining(c))
    return re.sub(r"[^a-z0-9_-]+", "-", ascii_only.strip().lower()).strip("-")


def fold(text: str) -> str:
    """Lowercase without accents, for matching phrases written either way."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def tokens(text: str) -> list[str]:
    """The name-like tokens of a text, normalised (`the GitHub access` → the, github, access)."""
    return [t for t in re.split(r"[^a-z0-9_]+", fold(text)) if t]


def split_clauses(text: str) -> list[str]:
    """Sentences and `then`-joined requests, each read on its own."""
    pieces = re.split(
        r"(?<=[.!?])\s+|\s*;\s*|\s+(?:and then|then|y luego|y despues|y después|luego)\s+",
        text.strip(),
    )
    return [p.strip(" ¿¡") for p in pieces if p and p.strip(" ¿¡.!?")]


# -- numbers -------------------------------------------------------------------------------

_NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "uno": 1, "una": 1, "dos": 2,
    "tres": 3, "cuatro": 4, "cinco": 5, "seis": 6, "siete": 7, "ocho": 8, "nueve": 9,
    "diez": 10, "once": 11, "doce": 12,
}  # fmt: skip


def number(word: str) -> int | None:
    """`4`, `four`, `cuatro` → 4."""
    word = fold(word)
    if word.isdigit():
        return int(word)
    return _NUMBERS.get(word)


_PARTY = re.compile(
    r"\b(?:for|para|party of|mesa de|somos)\s+(\d{1,2}|[a-z]+)"
    r"(?:\s+(?:people|persons|guests|of us|personas|comensales|pax))?\b"
)
_PARTY_COUNT = re.compile(r"\b(\d{1,2}|[a-z]+)\s+(?:people|persons|guests|personas|comensales)\b")


def party_size(text: str) -> int | None:
    """`for two`, `para 4 personas`, `party of 3`, `6 people`."""
    folded = fold(text)
    for pattern in (_PARTY, _PARTY_COUNT):
        for match in pattern.finditer(folded):
            size = number(match.group(1))
            if size is not None and 1 <= size <= 20:
                return size
    return None


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

_WEEKDAYS = {
    "monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5,
    "sunday": 6, "lunes": 0, "martes": 1, "miercoles": 2, "jueves": 3, "viernes": 4,
    "sabado": 5, "domingo": 6,
}  # fmt: skip
_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12,
    "enero": 1, "febrero": 2, "marzo": 3, "abril": 4, "mayo": 5, "junio": 6, "julio": 7,
    "agosto": 8, "septiembre": 9, "setiembre": 9, "octubre": 10, "noviembre": 11,
    "diciembre": 12,
}  # fmt: skip
_MONTH_RE = "|".join(_MONTHS)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:de\s+|of\s+)?({_MONTH_RE})\b")
_MONTH_DAY = re.compile(rf"\b({_MONTH_RE})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b")
_SLASH = re.compile(r"\b(\d{1,2})/(\d{1,2})(?:/(\d{4}))?\b")
_DAY_ONLY = re.compile(r"\b(?:el dia|el|on the|the)\s+(\d{1,2})(?:st|nd|rd|th)?\b(?!\s*[:.h]\d)")
_WEEKDAY = re.compile(
    r"\b(next\s+|this\s+|el proximo\s+|proximo\s+|este\s+|el\s+)?("
    + "|".join(_WEEKDAYS)
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
            ahead = (_WEEKDAYS[m.group(2)] - today.weekday()) % 7
            explicit_next = (m.group(1) or "").strip() in {"next", "el proximo", "proximo"}
            if ahead == 0 and (explicit_next or m.group(3)):
                ahead = 7
            relative = today + timedelta(days=ahead)
    elif m := _DAY_MONTH.search(folded):
        found = True
        relative = _future(today, _MONTHS[m.group(2)], int(m.group(1))) if today else None
    elif m := _MONTH_DAY.search(folded):
        found = True
        relative = _future(today, _MONTHS[m.group(1)], int(m.group(2))) if today else None
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


# -- names and lists ----------------------------------------------------------------------


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of a text, as a set."""
    return frozenset(text.split())


_NAME_STOP = (
    word_set(
        """today tonight tomorrow on at for this next please and with to from by around about
    people persons guests pm am morning evening night noon is free available open have has
    any table tables a an or but instead then too also hoy manana esta este noche tarde para
    por favor al y con sobre hacia las los personas gente mesa sitio libre disponible tiene
    hay o pero tambien luego mejor que the el la un una it"""
    )
    | frozenset(_WEEKDAYS)
    | frozenset(_MONTHS)
)
_ARTICLES = frozenset({"the", "el", "la", "los", "las"})
_WORD = re.compile(r"[^\W\d][\w'&-]*|\d[\w-]*", re.UNICODE)


def name_at(text: str, start: int) -> str | None:
    """A proper name starting at `start` (`Casa Pepe tomorrow` → `Casa Pepe`)."""
    segment = re.split(r"[,;:!?¿¡()\"]|\.(?:\s|$)", text[start:], maxsplit=1)[0]
    words = _WORD.findall(segment)
    taken: list[str] = []
    for index, word in enumerate(words):
        low = fold(word)
        if not taken and low in _ARTICLES:
            # "The Fat Duck" keeps its article; "el Asador" is just "Asador".
            following = words[index + 1] if index + 1 < len(words) else ""
            if not following[:1].isupper():
                return None
            if word[:1].isupper():
                taken.append(word)
            continue
        if low in _NAME_STOP or word[0].isdigit() or len(taken) >= 5:
            break
        taken.append(word)
    while taken and fold(taken[-1]) in {"de", "del", "of"}:
        taken.pop()
    if not taken:
        return None
    name = normalise_name(" ".join(taken))
    return name if RESOURCE.match(name) else None


_VENUE_PATTERNS = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\bis\s+(.+?)\s+(?:free|available|open)\b",
        r"\bdoes\s+(.+?)\s+have\b",
        r"\best[aá]r?[aá]?\s+(?:libre|disponible|abierto)\s+(.+)",
        r"\btiene\s+(.+?)\s+(?:mesa|sitio|hueco)\b",
        r"^(.+?)\s+tiene\s+(?:mesa|sitio|hueco)\b",
        r"\bavailability\s+(?:at|for|of|in)\s+(.+)",
        r"\bdisponibilidad\s+(?:en|de|del|para)\s+(.+)",
        r"\b(?:book|reserve|reserva|res[eé]rvame)\s+(?:(?:me|us|nos)\s+)?((?-i:[A-Z]).+)",
        r"\b(?:at|en|in)\s+(\S.*)",
    )
)


def venue(text: str) -> str | None:
    """The restaurant a phrase names: `at Casa Pepe`, `en Casa Pepe`, `is Casa Pepe free`."""
    stripped = text.strip(" ¿?¡!")
    for pattern in _VENUE_PATTERNS:
        for m in pattern.finditer(stripped):
            name = name_at(stripped, m.start(1))
            if name:
                return name
    return None


_LIST_SPLIT = re.compile(
    r"\s*(?:,|;|&|\+|\band\b|\by\b|\be\b|\bplus\b|\bas well as\b|\btambien\b|\bademas\b)\s*"
)
_LIST_END = re.compile(
    r"[.?!]|\b(?:please|por favor|thanks|gracias|book|reserve|transfer|send|reserva|reservar|"
    r"transfiere|envia|manda|check|comprueba|mira|for me|para mi|asap|now|ya|ahora)\b"
)
_ITEM_LEAD = {"the", "to", "a", "al", "el", "la", "los", "las", "my", "mi", "mis", "our", "on"}
_ITEM_TAIL = {"too", "tambien", "access", "accounts", "account", "acceso", "accesos", "also"}


def name_list(region: str) -> list[str]:
    """`github, jira and confluence` / `github, jira y confluence` → normalised names, in order."""
    folded = fold(region)
    if end := _LIST_END.search(folded):
        folded = folded[: end.start()]
    names: list[str] = []
    for raw in _LIST_SPLIT.split(folded):
        words = raw.split()
        while words and words[0] in _ITEM_LEAD:
            words.pop(0)
        while words and words[-1] in _ITEM_TAIL:
            words.pop()
        if not words or len(words) > 3:
            continue
        name = normalise_name(" ".join(words))
        # Repeats stay: the application, not the model, dedups by intent.
        if RESOURCE.match(name):
            names.append(name)
    return names


# -- money ---------------------------------------------------------------------------------

_AMOUNT = re.compile(
    r"(?P<pre>€|\$|£)?\s*(?P<int>\d{1,3}(?:[.,]\d{3})+(?![\d])|\d+)(?:[.,](?P<dec>\d{1,2})(?!\d))?"
    r"\s*(?P<cur>€|\$|£|euros?|eur\b|dollars?|usd\b|pounds?|gbp\b)?",
    re.IGNORECASE,
)
_CURRENCIES = {
    "€": "EUR", "euro": "EUR", "euros": "EUR", "eur": "EUR", "$": "USD", "dollar": "USD",
    "dollars": "USD", "usd": "USD", "£": "GBP", "pound": "GBP", "pounds": "GBP", "gbp": "GBP",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Money:
    """An amount in cents and its currency, and where it ended in the text."""

    cents: int
    currency: str
    end: int


def money(text: str) -> Money | None:
    """`50 euros`, `€12,50`, `1.000 EUR`, `$20` → cents and ISO currency (EUR by default)."""
    for m in _AMOUNT.finditer(text):
        whole = re.sub(r"[.,]", "", m.group("int"))
        if not whole:
            continue
        cents = int(whole) * 100 + int((m.group("dec") or "0").ljust(2, "0"))
        symbol = (m.group("pre") or m.group("cur") or "").lower()
        # A bare number inside a word (bob2) is not an amount.
        if m.start("int") > 0 and text[m.start("int") - 1].isalnum() and not m.group("pre"):
            continue
        if cents <= 0:
            continue
        return Money(cents, _CURRENCIES.get(symbol, "EUR"), m.end())
    return None


_RECIPIENT = re.compile(
    r"\b(?:to|a|al|para)\s+(?:(?:my|mi)\s+)?(?:(?:the\s+)?account\s+|la\s+cuenta\s+|cuenta\s+)?"
    r"([A-Za-z0-9][A-Za-z0-9_.-]{0,63})",
    re.IGNORECASE,
)
_SOURCE = re.compile(
    r"\b(?:from|desde)\s+(?:(?:my|mi)\s+)?(?:account\s+|cuenta\s+)?([A-Za-z0-9][A-Za-z0-9_.-]{0,63})",
    re.IGNORECASE,
)
_NOT_ACCOUNTS = frozenset({"the", "la", "el", "my", "mi", "me", "him", "her", "them", "las"})


def account_after(pattern: re.Pattern[str], text: str, start: int = 0) -> str | None:
    """The first account name the pattern finds after `start`."""
    for m in pattern.finditer(text, start):
        account = m.group(1).rstrip(".")
        if account.lower() not in _NOT_ACCOUNTS and ACCOUNT.match(account):
            return account
    return None


def recipient(text: str, start: int) -> str | None:
    """`… to bob-main` / `… a bob-main`, preferably after the amount."""
    return account_after(_RECIPIENT, text, start) or account_after(_RECIPIENT, text[:start])


def source_account(text: str) -> str | None:
    """`from savings` / `desde ahorros`."""
    return account_after(_SOURCE, text)
