"""The OpenAI Realtime adapter's framework-light parts: what was heard of each audio item
(the playback tracker), the closing being said, and a model's call checked before it is
sent to holdline. No network here; `openai_realtime.py` wires them to a `RealtimeSession`."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.realtime import RealtimePlaybackTracker
from agents.realtime.config import RealtimeAudioFormat

from holdline.client import DeliverySay

from ._common import SpeakMode, facts_prompt

# The marker line the closing's instructions end with; the words after it are the closing.
SAY_MARKER = "Say exactly this to the caller, word for word, and nothing else:"
# What the model hears as the tool's result when the call itself was malformed: no
# admission was attempted, so it must apologise and ask again rather than claim anything.
APOLOGY_OUTPUT = (
    "The request could not be read ({reason}), so nothing was started. "
    "Apologise briefly to the caller and ask them to say what they need again."
)
_G711 = ("g711", "pcmu", "pcma")


def audio_ms(audio_format: RealtimeAudioFormat | None, size: int) -> float:
    """How long `size` bytes of the session's output audio last (G.711: 8 kHz, one byte a
    sample; anything else: the Realtime API's PCM16 at 24 kHz)."""
    name = audio_format if isinstance(audio_format, str) else None
    if isinstance(audio_format, Mapping):
        name = str(audio_format.get("type", ""))
    elif name is None and audio_format is not None:
        name = str(getattr(audio_format, "type", ""))
    if name is not None and any(tag in name.lower() for tag in _G711):
        return size / 8.0
    return size / 48.0


class HeardTracker(RealtimePlaybackTracker):
    """The SDK's playback tracker, fed by the app's player (Twilio's returned marks, a local
    device), that also remembers how much of each item played: the SDK resets its own state
    on an interruption, before the app sees the event, and holdline needs the figure after."""

    def __init__(self) -> None:
        super().__init__()
        self.audio_format: RealtimeAudioFormat | None = None
        self.played: dict[str, float] = {}
        self.listeners: list[Callable[[str], None]] = []

    def set_audio_format(self, format: RealtimeAudioFormat) -> None:
        """The session's output format (set by the model)."""
        super().set_audio_format(format)
        self.audio_format = format

    def on_play_ms(self, item_id: str, item_content_index: int, ms: float) -> None:
        """`ms` of the item's audio reached the caller's ear."""
        super().on_play_ms(item_id, item_content_index, ms)
        self.played[item_id] = self.played.get(item_id, 0.0) + ms
        for listener in list(self.listeners):
            listener(item_id)

    def played_ms(self, item_id: str) -> float:
        """All the audio of `item_id` played so far."""
        return self.played.get(item_id, 0.0)


@dataclass
class Outgoing:
    """The closing being said: at most one at a time."""

    say: DeliverySay
    response_id: str | None = None
    item_id: str | None = None
    received_ms: float = 0.0
    transcript: str = ""
    generated: bool = False
    started: bool = False
    finished: bool = False
    heard: list[str] = field(default_factory=list)

    def heard_words(self, played_ms: float) -> str:
        """The words of what the model said that fit in the audio played: its transcript
        cut in proportion to the played share of the audio generated."""
        words = (self.transcript or self.say.text).split()
        if self.received_ms <= 0 or played_ms <= 0:
            return ""
        share = min(1.0, played_ms / self.received_ms)
        return " ".join(words[: int(len(words) * share)])


def instructions_for(say: DeliverySay, speak: SpeakMode = "text") -> str:
    """The response's instructions: holdline's closing word for word, or (`speak="model"`)
    the facts for the session's own model to phrase."""
    if speak == "model" and say.facts:
        return facts_prompt(say.text, say.facts)
    return f"{SAY_MARKER}\n{say.text}"


def malformed(name: str, arguments: str, known: Collection[str]) -> str | None:
    """Why a model's call cannot go to holdline (None when it can): an unknown tool, or
    arguments that are not one JSON object."""
    if name not in known:
        return f"there is no tool named {name!r}"
    try:
        parsed: Any = json.loads(arguments or "{}")
    except ValueError:
        return "its arguments are not valid JSON"
    if not isinstance(parsed, dict):
        return "its arguments are not a JSON object"
    return None
