"""Deterministic readers of proper names and lists in English and Spanish: a restaurant
(`at Casa Pepe`, `en Casa Pepe`) and a list of tools (`github, jira y confluence`, `the repo
named data-pipeline`)."""

from __future__ import annotations

import re

from .understanding import RESOURCE, fold, normalise_name, word_set
from .understanding_dates import MONTHS, WEEKDAYS

_NAME_STOP = (
    word_set(
        """today tonight tomorrow on at for this next please and with to from by around about
    people persons guests pm am morning evening night noon is free available open have has
    any table tables a an or but instead then too also hoy manana esta este noche tarde para
    por favor al y con sobre hacia las los personas gente mesa sitio libre disponible tiene
    hay o pero tambien luego mejor que the el la un una it"""
    )
    | frozenset(WEEKDAYS)
    | frozenset(MONTHS)
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


# What a resource is called when a request names its kind too: "the repo named X",
# "X's repo", "the X project", "el repositorio llamado X".
_KINDS = frozenset({
    "repo", "repos", "repository", "repositories", "project", "projects",
    "repositorio", "repositorios", "proyecto", "proyectos",
})
_NAMED = frozenset({"named", "called", "llamado", "llamada", "de", "del"})


def _resource_of(words: list[str]) -> str | None:
    """The resource a list item names once its kind is read away (None: only a kind)."""
    words = [w.removesuffix("'s").removesuffix("\u2019s") for w in words]
    if words and words[0] in _KINDS:
        # "repo named X", "repositorio llamado X", "repo X".
        words = words[1:]
        if words and words[0] in _NAMED:
            words = words[1:]
    elif words and words[-1] in _KINDS:
        # "X's repo", "X repo", "the X workspace".
        words = words[:-1]
    return " ".join(words) if words else None


def read_names(region: str) -> tuple[list[str], list[str]]:
    """The names a list gives, in order, and the kinds it mentions without a name ("the
    repo", "the repo named"): a request naming one of those cannot be told, so it is asked."""
    folded = fold(region)
    if end := _LIST_END.search(folded):
        folded = folded[: end.start()]
    names: list[str] = []
    unclear: list[str] = []
    for raw in _LIST_SPLIT.split(folded):
        words = raw.split()
        while words and words[0] in _ITEM_LEAD:
            words.pop(0)
        while words and words[-1] in _ITEM_TAIL:
            words.pop()
        if not words:
            continue
        resource = _resource_of(words)
        if resource is None:
            unclear.append(words[0].removesuffix("s"))
            continue
        if len(resource.split()) > 3:
            continue
        name = normalise_name(resource)
        # Repeats stay: the application, not the model, dedups by intent.
        if RESOURCE.match(name):
            names.append(name)
    return names, unclear


def name_list(region: str) -> list[str]:
    """`github, jira and confluence` / `github, jira y confluence` → normalised names, in order;
    `the repo named data-pipeline` and `data-pipeline's repo` → `data-pipeline`."""
    return read_names(region)[0]
