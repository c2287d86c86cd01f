"""How callers say the demo tools' requests: pure data for the offline recognizer.

Per demo tool, the catalogue names it acts on and the phrases callers use (English and
Spanish, `{a}`/`{b}`/`{c}` for names); and pronunciations, in the en-us phone set, for the
words the bundled dictionary lacks or that espeak-ng's voices say otherwise (Spanish words
included: only an English acoustic model ships). Each demo tool is declared with its
entry (`hints`); the surface builds the recognizer's vocabulary from the declared tools'
hints (`voice/speech_vocabulary.py`), so a deployment without the demo tools gets none of it.
"""

from __future__ import annotations

from libs.tools.declaration import SpeechHints

# The access catalogue: what "give me access to ..." names.
ACCESS_NAMES = (
    "github", "gitlab", "jira", "confluence", "slack", "notion", "figma", "zoom",
    "salesforce", "okta", "dropbox", "trello", "asana", "zendesk", "bitbucket", "docker",
)

_ACCESS_PHRASES = (
    ("en", "give me access to {a}"),
    ("en", "give me access to {a} and {b}"),
    ("en", "give me access to {a} {b} and {c}"),
    ("en", "grant me access to {a}"),
    ("en", "grant me access to {a} and {b}"),
    ("en", "i need access to {a}"),
    ("en", "i need access to {a} and {b}"),
    ("en", "undo the {a} access"),
    ("en", "cancel the {a} access"),
    ("es", "dame acceso a {a}"),
    ("es", "dame acceso a {a} y {b}"),
    ("es", "dame acceso a {a} {b} y {c}"),
    ("es", "necesito acceso a {a}"),
    ("es", "necesito acceso a {a} y {b}"),
)

_BOOKING_PHRASES = (
    ("en", "book a table for two tomorrow"),
    ("en", "book a table for two tomorrow at nine"),
    ("en", "check availability tomorrow"),
    ("en", "cancel the booking"),
    ("es", "reserva una mesa para dos mañana"),
    ("es", "reserva para dos mañana"),
)

_TRANSFER_PHRASES = (
    ("en", "send fifty euros to bob"),
    ("en", "cancel the transfer"),
    ("en", "don't do the transfer"),
    ("es", "cancela la transferencia"),
)

# tool name -> (catalogue names, phrases)
SPEECH: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...]]] = {
    "provision_access": (ACCESS_NAMES, _ACCESS_PHRASES),
    "book_table": ((), _BOOKING_PHRASES),
    "check_availability": ((), _BOOKING_PHRASES[2:3]),
    "transfer_money": ((), _TRANSFER_PHRASES),
}

# word -> pronunciations (en-us phones), first the dictionary's own when it has the word.
# Names as espeak-ng's English voices and its Spanish ones say them.
PRONUNCIATIONS: dict[str, tuple[str, ...]] = {
    "github": ("G IH T HH AH B", "HH IY T UW B", "G IY T UW B"),
    "gitlab": ("G IH T L AE B", "HH IY T L AA B"),
    "jira": ("JH IH R AH", "JH IY R AH", "HH IY R AA", "Y IY R AH", "D IY R AH", "JH IY ER"),
    "confluence": ("K AA N F L UW AH N S", "K OW M F L UW EH N TH EH", "K OW N F L UW EH N S EH"),
    "slack": ("S L AE K", "EH S L AA K"),
    "notion": ("N OW SH AH N", "N OW T Y OW N"),
    "figma": ("F IH G M AH", "F IY G M AA"),
    "zoom": ("Z UW M", "TH OW M", "S UW M"),
    "okta": ("AA K T AH", "OW K T AA"),
    "trello": ("T R EH L OW", "T R EH Y OW"),
    "asana": ("AH S AA N AH", "AA S AA N AA"),
    "zendesk": ("Z EH N D EH S K",),
    "bitbucket": ("B IH T B AH K AH T", "B IH T B AH K IH T"),
    # Spanish, in en-us phones (Castilian and Latin American espeak-ng voices).
    "dame": ("D AA M EY",),
    "acceso": ("AA K TH EH S OW", "AA K S EH S OW"),
    "a": ("AH", "AA"),
    "y": ("IY",),
    "necesito": ("N EH TH EH S IY T OW", "N EH S EH S IY T OW"),
    "reserva": ("R EH S EH R B AA",),
    "una": ("UW N AA",),
    "mesa": ("M EY S AA",),
    "para": ("P AA R AA",),
    "dos": ("D OW S",),
    "mañana": ("M AA N Y AA N AA",),
    "cancela": ("K AA N TH EH L AA", "K AA N S EH L AA"),
    "la": ("L AA",),
    "transferencia": ("T R AA N S F EH R EH N TH Y AA", "T R AA N S F EH R EH N S Y AA"),
    "sí": ("S IY",),
    "espera": ("EH S P EH R AA",),
    "un": ("UW N",),
    "momento": ("M OW M EH N T OW",),
    "gracias": ("G R AA TH Y AA S", "G R AA S Y AA S"),
}


def hints(tool: str) -> SpeechHints | None:
    """The speech hints of one demo tool (None for a tool callers do not name aloud)."""
    if tool not in SPEECH:
        return None
    names, phrases = SPEECH[tool]
    return SpeechHints(names=names, phrases=phrases, pronunciations=PRONUNCIATIONS)
