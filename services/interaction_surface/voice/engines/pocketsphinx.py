"""Offline STT: pocketsphinx with a small domain language model built at start-up.

The general English LM mishears telephone audio ("give me access to github" → "the hug
and the"); a bigram LM over the demo tools' phrases and a catalogue of common resource
names does far better and decodes in tens of milliseconds. Words the bundled CMU
dictionary lacks get pronunciations here. Decoders are pooled (loading the acoustic model
takes a few hundred ms), each primed once with silence so cepstral normalisation starts
from a sane estimate. Audio is fed as it arrives (8 kHz → 16 kHz).
"""

from __future__ import annotations

import collections
import importlib
import itertools
import logging
import math
import random
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..codec import Resampler, silence_ulaw, ulaw_to_pcm16
from ..floor import Word
from .base import SpeechError

log = logging.getLogger(__name__)

RESOURCES = (
    "github", "gitlab", "jira", "confluence", "slack", "notion", "figma", "zoom",
    "salesforce", "okta", "dropbox", "trello", "asana", "zendesk", "bitbucket", "docker",
)
# CMU-style pronunciations for names the bundled dictionary lacks.
EXTRA_WORDS = {
    "gitlab": "G IH T L AE B",
    "jira": "JH IH R AH",
    "figma": "F IH G M AH",
    "okta": "AA K T AH",
    "trello": "T R EH L OW",
    "asana": "AH S AA N AH",
    "zendesk": "Z EH N D EH S K",
    "bitbucket": "B IH T B AH K AH T",
}
TEMPLATES = (
    "give me access to {a}",
    "give me access to {a} and {b}",
    "give me access to {a} {b} and {c}",
    "grant me access to {a}",
    "grant me access to {a} and {b}",
    "i need access to {a}",
    "wait",
    "wait one moment please",
    "hold on",
    "one moment",
    "cancel the transfer",
    "cancel the booking",
    "don't do the transfer",
    "yes",
    "no",
    "yes please",
    "book a table for two tomorrow",
    "check availability tomorrow",
    "what is the status",
    "thank you",
    # Backchannels: heard as what they are, so a "mm-hmm" is not forced into a request.
    "mm hmm",
    "uh huh",
    "mhm",
    "hmm",
    "aha",
    "right",
)


def domain_corpus(seed: int = 1, per_template: int = 30) -> list[list[str]]:
    """Sentences from the templates with resource names drawn at random (reproducibly)."""
    rng = random.Random(seed)  # noqa: S311 - corpus variety, not security
    out = []
    for template in TEMPLATES:
        for _ in range(per_template if "{" in template else 3):
            a, b, c = rng.sample(RESOURCES, 3)
            out.append(template.format(a=a, b=b, c=c).split())
    return out


def arpa_bigram(sentences: Iterable[list[str]], discount: float = 0.5) -> str:
    """An absolute-discount bigram LM in ARPA format."""
    unigrams: collections.Counter[str] = collections.Counter()
    bigrams: collections.Counter[tuple[str, str]] = collections.Counter()
    for sentence in sentences:
        words = ["<s>", *sentence, "</s>"]
        unigrams.update(words)
        bigrams.update(itertools.pairwise(words))
    total = sum(unigrams.values())
    followers = collections.Counter(a for a, _ in bigrams)
    lines = ["\\data\\", f"ngram 1={len(unigrams)}", f"ngram 2={len(bigrams)}", "", "\\1-grams:"]
    for word, count in sorted(unigrams.items()):
        backoff = discount * followers[word] / count if followers[word] else 1.0
        lines.append(f"{math.log10(count / total):.4f} {word} {math.log10(backoff):.4f}")
    lines += ["", "\\2-grams:"]
    for (first, second), count in sorted(bigrams.items()):
        lines.append(f"{math.log10((count - discount) / unigrams[first]):.4f} {first} {second}")
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)


class PocketsphinxStt:
    """`HOLDLINE_STT=pocketsphinx`. `primer`: μ-law 8 kHz speech that seeds the cepstral
    mean (silence alone gives a poor estimate); every utterance starts from that mean, so
    a transcript never depends on what earlier callers said."""

    # The resource names the domain LM can produce: any other value was not said as such.
    known_values = frozenset(RESOURCES)

    def __init__(self, primer: bytes = b"") -> None:
        self._primer = primer
        try:
            self._ps: Any = importlib.import_module("pocketsphinx")
        except ImportError as exc:
            raise SpeechError("pocketsphinx is not installed") from exc
        self._dir = Path(tempfile.mkdtemp(prefix="holdline-stt-"))
        corpus = domain_corpus()
        words = sorted({w for sentence in corpus for w in sentence})
        (self._dir / "domain.dict").write_text(self._dictionary(words))
        (self._dir / "domain.arpa").write_text(arpa_bigram(corpus))
        self._idle: list[Any] = []
        self._cmn = ""
        self._idle.append(self._decoder())

    def _dictionary(self, words: list[str]) -> str:
        bundled = Path(self._ps.get_model_path()) / "en-us" / "cmudict-en-us.dict"
        wanted = set(words)
        found: dict[str, str] = {}
        with bundled.open(encoding="utf-8") as handle:
            for line in handle:
                word, _, phones = line.strip().partition(" ")
                if word in wanted and word not in found:
                    found[word] = phones
        for word in words:
            if word not in found and word not in EXTRA_WORDS:
                raise SpeechError(f"no pronunciation for {word!r}")
        return "".join(
            f"{w} {found.get(w) or EXTRA_WORDS[w]}\n" for w in words
        )

    def _decoder(self) -> Any:
        decoder = self._ps.Decoder(
            samprate=16000,
            lm=str(self._dir / "domain.arpa"),
            dict=str(self._dir / "domain.dict"),
            loglevel="ERROR",
        )
        if not self._cmn:
            audio = self._primer or silence_ulaw(500)
            decoder.start_utt()
            decoder.process_raw(Resampler(8000, 16000).convert(ulaw_to_pcm16(audio)))
            decoder.end_utt()
            self._cmn = str(decoder.get_cmn())
        return decoder

    def session(self) -> _Utterance:
        """A recognizer for one utterance, on a pooled decoder."""
        decoder = self._idle.pop() if self._idle else self._decoder()
        decoder.set_cmn(self._cmn)
        return _Utterance(self, decoder)

    def release(self, decoder: Any) -> None:
        """A decoder is free again."""
        self._idle.append(decoder)


class _Utterance:
    def __init__(self, engine: PocketsphinxStt, decoder: Any) -> None:
        self._engine = engine
        self._decoder = decoder
        self._resampler = Resampler(8000, 16000)
        self._done = False
        self._words: list[Word] = []
        decoder.start_utt()

    def feed(self, pcm16_8k: bytes) -> None:
        if not self._done:
            self._decoder.process_raw(self._resampler.convert(pcm16_8k), full_utt=False)

    def finish(self) -> str:
        if self._done:
            return ""
        self._done = True
        self._decoder.end_utt()
        hypothesis = self._decoder.hyp()
        if hypothesis is not None:
            # Each segment's posterior probability: how sure the decoder is of that word.
            self._words = [
                Word(str(seg.word), float(seg.prob))
                for seg in self._decoder.seg()
                if not str(seg.word).startswith(("<", "["))
            ]
        self._engine.release(self._decoder)
        return str(hypothesis.hypstr) if hypothesis is not None else ""

    def words(self) -> list[Word]:
        return list(self._words)

