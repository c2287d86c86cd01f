"""Offline STT: pocketsphinx with a small domain language model built at start-up.

The general English LM mishears telephone audio ("give me access to github" → "the hug
and the"); an n-gram LM over the phrases and catalogue names of a `SpeechVocabulary` (given
by the composition root, from the declared tools: vocabulary.py) does far better and
decodes in tens of milliseconds. That LM also forces a misheard or unknown name onto a
catalogue name at full posterior, so each word's confidence weighs in the n-best
hypotheses and the word's duration too (confidence.py): a name the voice floor may act on
without a question is one the acoustics settle. Words the bundled CMU dictionary lacks get the
vocabulary's pronunciations. Decoders are pooled (loading the acoustic model takes a few
hundred ms), each primed once so cepstral normalisation starts from a sane estimate.
Audio is fed as it arrives (8 kHz → 16 kHz).
"""

from __future__ import annotations

import importlib
import itertools
import logging
import tempfile
from pathlib import Path
from typing import Any

from ..codec import Resampler, silence_ulaw, ulaw_to_pcm16
from ..floor import Word
from .base import SpeechError
from .confidence import NBEST, base_word, word_confidence
from .vocabulary import SpeechVocabulary, arpa, dictionary, sentences

log = logging.getLogger(__name__)

# Decoder settings tuned on the telephone speech corpus (testkit/speech_corpus.py,
# bench/speech.py): how much the language model weighs against the acoustics, and what a
# word costs.
DECODER_OPTIONS: dict[str, Any] = {}
# Absolute discount of the n-gram model: the probability mass left for word sequences the
# phrases never make (small: a caller says the phrases, and a phrase of one language does
# not lend its words to another).
LM_DISCOUNT = 0.2


class PocketsphinxStt:
    """`HOLDLINE_STT=pocketsphinx`. `primer`: μ-law 8 kHz speech that seeds the cepstral
    mean (silence alone gives a poor estimate); every utterance starts from that mean, so
    a transcript never depends on what earlier callers said."""

    def __init__(
        self,
        primer: bytes = b"",
        vocabulary: SpeechVocabulary | None = None,
        options: dict[str, Any] | None = None,
    ) -> None:
        self._primer = primer
        self._vocabulary = vocabulary or SpeechVocabulary()
        self._options = {**DECODER_OPTIONS, **(options or {})}
        # The names the domain LM can produce: any other value was not said as such.
        self.known_values = frozenset(self._vocabulary.names)
        try:
            self._ps: Any = importlib.import_module("pocketsphinx")
        except ImportError as exc:
            raise SpeechError("pocketsphinx is not installed") from exc
        self._dir = Path(tempfile.mkdtemp(prefix="holdline-stt-"))
        corpus = sentences(self._vocabulary)
        words = sorted({w for sentence in corpus for w in sentence})
        (self._dir / "domain.dict").write_text(self._dictionary(words))
        (self._dir / "domain.arpa").write_text(arpa(corpus, discount=LM_DISCOUNT))
        self._idle: list[Any] = []
        self._cmn = ""
        self._idle.append(self._decoder())

    def _dictionary(self, words: list[str]) -> str:
        bundled_path = Path(self._ps.get_model_path()) / "en-us" / "cmudict-en-us.dict"
        wanted = set(words)
        bundled: dict[str, str] = {}
        with bundled_path.open(encoding="utf-8") as handle:
            for line in handle:
                word, _, phones = line.strip().partition(" ")
                if word in wanted and word not in bundled:
                    bundled[word] = phones
        text, missing = dictionary(words, bundled, self._vocabulary.pronunciations)
        if missing:
            raise SpeechError(f"no pronunciation for {', '.join(map(repr, missing))}")
        return text

    def _decoder(self) -> Any:
        decoder = self._ps.Decoder(
            samprate=16000,
            lm=str(self._dir / "domain.arpa"),
            dict=str(self._dir / "domain.dict"),
            loglevel="FATAL",
            **self._options,
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
            self._words = self._scored(str(hypothesis.hypstr))
        self._engine.release(self._decoder)
        return str(hypothesis.hypstr) if hypothesis is not None else ""

    def words(self) -> list[Word]:
        return list(self._words)

    def _scored(self, transcript: str) -> list[Word]:
        """The transcript's words, each with its confidence (engines/confidence.py): the
        lattice posterior, the share of the n-best hypotheses that hold it, its duration."""
        decoder = self._decoder
        # The n-best iterator can yield None once the lattice has no more paths: it ends there.
        ranked = itertools.takewhile(lambda h: h is not None, decoder.nbest() or ())
        hypotheses = [str(h.hypstr) for h in itertools.islice(ranked, NBEST)]
        words: list[Word] = []
        for seg in decoder.seg() or ():
            token = str(seg.word)
            if token.startswith(("<", "[")):
                continue
            phones = len(str(decoder.lookup_word(token) or "").split())
            frames = int(seg.end_frame) - int(seg.start_frame) + 1
            word = base_word(token)
            words.append(Word(word, word_confidence(
                float(seg.prob), frames=frames, phones=phones, hypotheses=hypotheses, word=word,
                names=self._engine.known_values, best=transcript,
            )))
        return words

