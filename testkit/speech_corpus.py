"""A speech corpus of the demo's requests, made at test time with espeak-ng, as a phone hears it.

Each utterance is synthesised by espeak-ng with one of several voices (four English, two
Spanish) and speaking rates, filtered to the telephone band (300-3400 Hz), mixed with line
noise at 20 dB SNR, then resampled to 8 kHz and μ-law encoded by the phone path's own codec
(`voice/codec.py`). Everything is seeded: the same corpus on every run and machine (espeak-ng's
output for a given version is deterministic). Requests with the catalogue names each one
names (`Utterance.names`) so a benchmark can score what the recognizer heard.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from libs.tools import default_registry
from services.interaction_surface.voice.codec import pcm16_to_ulaw, resample
from services.interaction_surface.voice.engines.vocabulary import SpeechVocabulary
from services.interaction_surface.voice.speech_vocabulary import vocabulary_of

ENGLISH_VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-scotland")
SPANISH_VOICES = ("es", "es-419")
RATES = (140, 170, 200)
SNR_DB = 20.0
BAND_HZ = (300.0, 3400.0)
_WAV_HEADER = 44

# (text, language, catalogue names it asks for): the README's "Things to try" and the demo
# tools' phrasings, with the names the demo's catalogue holds.
REQUESTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("give me access to github and jira", "en", ("github", "jira")),
    ("give me access to github jira and confluence", "en", ("github", "jira", "confluence")),
    ("give me access to slack", "en", ("slack",)),
    ("give me access to notion and gitlab", "en", ("notion", "gitlab")),
    ("grant me access to figma", "en", ("figma",)),
    ("grant me access to zoom and okta", "en", ("zoom", "okta")),
    ("i need access to salesforce", "en", ("salesforce",)),
    ("i need access to dropbox and trello", "en", ("dropbox", "trello")),
    ("give me access to asana", "en", ("asana",)),
    ("give me access to zendesk and bitbucket", "en", ("zendesk", "bitbucket")),
    ("i need access to docker", "en", ("docker",)),
    ("give me access to confluence and slack", "en", ("confluence", "slack")),
    ("grant me access to jira", "en", ("jira",)),
    ("i need access to gitlab and figma", "en", ("gitlab", "figma")),
    ("give me access to okta", "en", ("okta",)),
    ("give me access to trello and asana", "en", ("trello", "asana")),
    ("undo the github access", "en", ("github",)),
    ("send fifty euros to bob", "en", ()),
    ("don't do the transfer", "en", ()),
    ("book a table for two tomorrow at nine", "en", ()),
    ("give me access to github", "en", ("github",)),
    ("i need access to notion", "en", ("notion",)),
    ("give me access to bitbucket and docker", "en", ("bitbucket", "docker")),
    ("grant me access to salesforce and zendesk", "en", ("salesforce", "zendesk")),
    ("dame acceso a github y jira", "es", ("github", "jira")),
    ("necesito acceso a slack", "es", ("slack",)),
    ("dame acceso a confluence", "es", ("confluence",)),
    ("necesito acceso a notion y figma", "es", ("notion", "figma")),
    ("dame acceso a gitlab", "es", ("gitlab",)),
    ("necesito acceso a zoom", "es", ("zoom",)),
    ("reserva una mesa para dos mañana", "es", ()),
    ("cancela la transferencia", "es", ()),
    ("dame acceso a trello y asana", "es", ("trello", "asana")),
    ("necesito acceso a jira", "es", ("jira",)),
)


@dataclass(frozen=True, slots=True)
class Utterance:
    """One request as a caller's phone sends it."""

    text: str
    language: str
    voice: str
    rate: int
    # The catalogue names the request asks for (empty: a request without one).
    names: tuple[str, ...]
    # μ-law, 8 kHz, mono.
    audio: bytes


def plan(seed: int = 7) -> list[tuple[str, str, tuple[str, ...], str, int]]:
    """Which (text, language, names, voice, rate) the corpus holds: each English request
    with every English voice, each Spanish one with both Spanish voices, each at a rate
    drawn (seeded) from `RATES`."""
    rng = random.Random(seed)
    out: list[tuple[str, str, tuple[str, ...], str, int]] = []
    for text, language, names in REQUESTS:
        voices = ENGLISH_VOICES if language == "en" else SPANISH_VOICES
        out.extend((text, language, names, voice, rng.choice(RATES)) for voice in voices)
    return out


def _espeak(text: str, voice: str, rate: int) -> tuple[np.ndarray, int]:
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise RuntimeError("espeak-ng is not installed (scripts/ensure-system-deps.sh)")
    wav = subprocess.run(
        [binary, "--stdout", "-v", voice, "-s", str(rate), "--", text],
        check=True, capture_output=True, timeout=30,
    ).stdout
    rate_hz = int.from_bytes(wav[24:28], "little")
    return np.frombuffer(wav[_WAV_HEADER:], dtype="<i2").astype(np.float64), rate_hz


def phone_line(samples: np.ndarray, rate_hz: int, rng: np.random.Generator) -> bytes:
    """Telephone band, line noise at `SNR_DB`, 8 kHz μ-law (through the phone path's codec)."""
    # Half a second of quiet around the speech, as between a caller's turns.
    pad = np.zeros(rate_hz // 4)
    signal = np.concatenate([pad, samples, pad, pad])
    spectrum = np.fft.rfft(signal)
    freqs = np.fft.rfftfreq(len(signal), 1 / rate_hz)
    band = (freqs >= BAND_HZ[0]) & (freqs <= BAND_HZ[1])
    speech = np.fft.irfft(spectrum * band, len(signal))
    voiced = speech[np.abs(speech) > 0.05 * np.abs(speech).max()] if speech.any() else speech
    power = float(np.mean(voiced**2)) if len(voiced) else 1.0
    noise = rng.standard_normal(len(signal))
    noise = np.fft.irfft(np.fft.rfft(noise) * band, len(signal))
    noise *= np.sqrt(power / (10 ** (SNR_DB / 10)) / max(float(np.mean(noise**2)), 1e-9))
    mixed = np.clip(speech + noise, -32767, 32767).astype("<i2").tobytes()
    return pcm16_to_ulaw(resample(mixed, rate_hz, 8000))


def _render(item: tuple[str, str, tuple[str, ...], str, int], seed: int) -> Utterance:
    text, language, names, voice, rate = item
    samples, rate_hz = _espeak(text, voice, rate)
    audio = phone_line(samples, rate_hz, np.random.default_rng(seed))
    return Utterance(text, language, voice, rate, names, audio)


def corpus(seed: int = 7, items: Sequence[tuple[str, str, tuple[str, ...], str, int]] = ()) -> list[
    Utterance
]:
    """Every utterance of `plan(seed)` (or of `items`), rendered (espeak-ng runs two at a time)."""
    chosen = list(items) or plan(seed)
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(_render, chosen, [seed * 1000 + i for i in range(len(chosen))]))


def primer(text: str, voice: str = "en-us", rate: int = 175) -> bytes:
    """What the surface primes its recognizer with, over the same telephone line."""
    samples, rate_hz = _espeak(text, voice, rate)
    return phone_line(samples, rate_hz, np.random.default_rng(0))


def demo_vocabulary() -> SpeechVocabulary:
    """The recognizer's vocabulary as the demo's surface builds it (app.py)."""
    return vocabulary_of(default_registry().tools())
