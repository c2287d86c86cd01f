"""What the mock model recognises in a turn: its phrase patterns in English and Spanish,
and the words that name a tool or an operation. All patterns run on folded text (lowercase,
no accents)."""

from __future__ import annotations

import re

from libs.models.interface import LiveOperation

from . import understanding as u


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


CANCEL_RE = _rx(
    r"\b(?:cancel|abort|stop|call off|never ?mind|(?:don'?t|do not) (?:do|make|send|book|"
    r"transfer|grant|give|pay)|cancela|cancelala|cancelalo|cancelalas|cancelalos|cancelar|"
    r"anula|anulala|anulalo|anular|deten|detenla|detenlo|no (?:la |lo |me |le |les )?"
    r"(?:hagas|envies|mandes|reserves|transfieras|des|pagues))\b"
)
UNDO_RE = _rx(
    r"\b(?:undo|revert|roll ?back|revoke|remove (?:my |the )?access|take away|deshaz|deshazlo|"
    r"deshazla|deshacer|revierte|revertir|revoca|revocame|revocar|quita|quitame|quitar|"
    r"retira|retirame)\b"
)
WEAK_CANCEL_RE = _rx(r"\b(?:forget(?: about)?|i don'?t want|no quiero|ya no quiero|olvida\w*)\b")
ALL_RE = _rx(r"\b(?:everything|all of (?:it|them)|all|todo|todas|todos)\b")
STATUS_RE = _rx(
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
WAIT_RE = _rx(
    r"^(?:wait|hold on|hang on|one (?:sec|second|moment)|just a (?:sec|second|moment)|"
    r"espera\w*|un momento|un segundo|momento)\b"
)
# Whole first phrases, words joined by "_" (see first_phrase).
YES_PHRASES = u.word_set(
    "yes yeah yep yup sure ok okay confirm confirmed i_confirm go_ahead do_it yes_do_it "
    "yes_go_ahead correct si vale claro confirmo confirmado confirmada adelante hazlo hazla "
    "de_acuerdo si_adelante si_hazlo si_confirmo correcto"
)
YES_LEAD_RE = _rx(r"^(?:confirm|confirmo|confirma|confirmala|confirmalo|approve|apruebo)\b")
NO_PHRASES = u.word_set(
    "no nope nah no_thanks no_thank_you no_gracias mejor_no not_now ahora_no don't dont"
)
GREETING_RE = _rx(r"^(?:hi|hello|hey|good (?:morning|afternoon|evening)|hola|buenas|buenos dias)\b")
THANKS_RE = _rx(r"\b(?:thanks|thank you|gracias)\b")
TRANSFER_VERB_RE = _rx(
    r"\b(?:send|transfer|pay|wire|move|transfiere\w*|transferir|envia\w*|manda\w*|paga\w*|"
    r"transferencia|haz una transferencia)\b"
)
TRANSFER_NOUN_RE = _rx(r"\b(?:transfer|transfiere\w*|transferir|transferencia)\b")
ACCESS_INTROS = (
    _rx(r"\b(?:access|accesses)\s+(?:to|for|on)\b\s*"),
    _rx(r"\b(?:grant|provision)\s+(?:me\s+|us\s+)?(?:access\s+(?:to\s+)?)?"),
    _rx(r"\badd me to\s+"),
    _rx(r"\baccesos?\s+(?:a|al|para|en|de)\b\s*"),
    _rx(r"\bpermisos?\s+(?:de|para|en|a)\b\s*"),
    _rx(r"\bdame de alta en\s+"),
)
ACCESS_BEFORE_RE = _rx(r"\b(?:give me|i need|i want|get me)\s+(.+?)\s+access\b")
AVAILABILITY_RE = _rx(
    r"\b(?:free|available|availability|any tables?|have (?:a )?(?:table|room)|libre|"
    r"disponible|disponibilidad|hay (?:mesa|sitio)|tiene(?: \w+){0,3} (?:mesa|sitio)|hueco)\b"
)
BOOKING_RE = _rx(r"\b(?:book|reserve|reservation|table for|reserva\w*|mesa para)\b")
CHANGE_RE = _rx(
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


def tool_words(tool: str) -> frozenset[str]:
    known = _TOOL_WORDS.get(tool)
    if known is not None:
        return known
    return frozenset(w for w in tool.split("_") if len(w) >= 4)


def names_of(op: LiveOperation) -> set[str]:
    names = {u.normalise_name(op.label)} if op.label else set()
    for value in op.arguments.values():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if isinstance(item, str) and len(item) >= 3 and not item.isdigit():
                names.add(u.normalise_name(item))
    return {n for n in names if n}


def first_phrase(folded: str) -> str:
    """`Yes, please, the transfer` → `yes` (words joined by `_`, as in YES_PHRASES)."""
    head = re.split(r"[,.;!?]", folded.strip(" ¿¡"), maxsplit=1)[0]
    head = re.sub(r"\b(?:please|por favor)\b", " ", head)
    return "_".join(head.split())
