"""Small, deterministic readers of English and Spanish phrases: folding, names, numbers,
party sizes and amounts. Dates and times are read in `understanding_dates.py`, proper names
and lists in `understanding_names.py`. The mock model is built from them; nothing here reads
the clock."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

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


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of a text, as a set."""
    return frozenset(text.split())


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
