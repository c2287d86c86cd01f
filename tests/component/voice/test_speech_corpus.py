"""The offline recognizer on a telephone speech corpus made in this run (espeak-ng, four
English and two Spanish voices, three rates, 300-3400 Hz, line noise at 20 dB SNR, 8 kHz
μ-law), decoded through the engine's session API and judged by the voice floor's own rule.

What holds today is asserted as a floor under the measured figures; the issue's targets are
asserted too, as an expected failure that turns into a failure of the suite the day they
hold (strict), so the gap stays visible. The figures: bench/results/speech.json and
docs/guides/telephony.md.
"""

from __future__ import annotations

import asyncio

import pytest

from bench.speech import Outcome, demo_engine, figures, judge
from services.interaction_surface.voice.wiring import PRIMER_TEXT
from testkit.speech_corpus import ENGLISH_VOICES, RATES, SPANISH_VOICES, corpus, primer

# Building and decoding the corpus takes about 40 s of CPU (longer on a busy machine).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    utterances = corpus(seed=7)
    engine = demo_engine(primer(PRIMER_TEXT))
    return asyncio.run(judge(engine, utterances))


def test_the_corpus_is_telephone_speech_of_many_voices(outcomes: list[Outcome]) -> None:
    utterances = [o.utterance for o in outcomes]
    assert len(utterances) >= 100
    assert {u.voice for u in utterances} == {*ENGLISH_VOICES, *SPANISH_VOICES}
    assert {u.rate for u in utterances} == set(RATES)
    assert {u.language for u in utterances} == {"en", "es"}
    # 8 kHz μ-law: one byte a sample, a quarter second of quiet before the speech.
    assert all(len(u.audio) > 8000 and u.audio[:100] != u.audio[100:200] for u in utterances)
    assert corpus(seed=7, items=[(u.text, u.language, u.names, u.voice, u.rate)
                                 for u in utterances[:2]]) == utterances[:2]


def test_the_recognizer_holds_its_measured_floor(outcomes: list[Outcome]) -> None:
    result = figures(outcomes)
    assert result["names_recognised"] >= 0.45
    assert result["by_language"]["es"]["names_recognised"] >= 0.25
    assert result["admitted_without_question"] >= 0.10
    # A name outside what was said is admitted in a minority of requests only.
    assert result["admitted_wrong"] <= 0.2 * result["requests_with_names"]


@pytest.mark.xfail(strict=True, reason="issue 43 targets: not reached by the offline "
                   "recognizer on band-limited noisy speech (see docs/guides/telephony.md)")
def test_the_issue_targets(outcomes: list[Outcome]) -> None:
    result = figures(outcomes)
    assert result["names_recognised"] >= 0.95
    assert result["admitted_without_question"] >= 0.90
    assert result["admitted_wrong"] == 0
