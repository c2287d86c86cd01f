"""Offline recognition of the demo's requests on telephone speech: names heard, requests
admitted without a question, requests admitted with a wrong name.

`.venv/bin/python -m bench.speech` synthesises the corpus (testkit/speech_corpus.py:
espeak-ng, four English and two Spanish voices, three rates, telephone band, line noise at
20 dB SNR, 8 kHz μ-law), decodes every utterance through the engine's session API with the
demo's vocabulary, asks the mock model what it would call, and lets the voice floor's own
rule (`floor.doubtful_values`) decide: admitted as heard, or asked "did you say ...?".
Results: `bench/results/speech.json`, with the trade-off curve (admitted without a question
against admitted with a wrong name, as the floor's threshold moves) on the calibration split
(`CALIBRATION_SEED`) and on the held-out one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine
from demo.models.mock import MockModel
from libs.models.interface import TurnRequest
from libs.tools import default_registry
from services.interaction_surface.chat.conversation import tool_spec
from services.interaction_surface.voice.codec import ulaw_to_pcm16
from services.interaction_surface.voice.engines.base import heard_words
from services.interaction_surface.voice.engines.pocketsphinx import PocketsphinxStt
from services.interaction_surface.voice.floor import (
    FloorConfig,
    Word,
    doubtful_values,
    normalise,
)
from services.interaction_surface.voice.wiring import PRIMER_TEXT
from testkit.speech_corpus import Utterance, corpus, demo_vocabulary, primer

RESULTS = Path(__file__).parent / "results" / "speech.json"
# The corpus seed the recognizer's confidence is calibrated on (engines/confidence.py); the
# figures are those of the held-out seed (7, the component test's).
CALIBRATION_SEED = 11
# The floor thresholds of the trade-off curve.
THRESHOLDS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one utterance."""

    utterance: Utterance
    transcript: str
    # The names asked for that the transcript holds.
    names_heard: int
    # The calls the model proposed, as (tool, arguments).
    calls: tuple[tuple[str, Mapping[str, Any]], ...]
    # The floor's verdict: admitted as heard (no question asked).
    admitted: bool
    # Admitted with names other than the ones asked for.
    wrong: bool
    # The heard words with the recognizer's confidence, for other thresholds (`curve`).
    words: tuple[Word, ...] = ()


def demo_engine(primer_audio: bytes, options: dict[str, Any] | None = None) -> PocketsphinxStt:
    """The recognizer as the demo's surface builds it."""
    return PocketsphinxStt(primer_audio, demo_vocabulary(), options)


def _accesses(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> set[str]:
    return {
        str(a)
        for tool, args in calls
        if tool == "provision_access"
        for a in args.get("accesses", ())
    }


async def judge(engine: PocketsphinxStt, utterances: Sequence[Utterance]) -> list[Outcome]:
    """Decode each utterance and let the floor's rule decide on the model's calls."""
    model = MockModel()
    tools = tuple(tool_spec(t) for t in default_registry().tools())
    today = datetime.now(UTC).date().isoformat()
    out: list[Outcome] = []
    for i, u in enumerate(utterances):
        recognizer = engine.session()
        recognizer.feed(ulaw_to_pcm16(u.audio))
        text = recognizer.finish().strip()
        words = heard_words(recognizer, text)
        said = normalise(text).split()
        calls: tuple[tuple[str, Mapping[str, Any]], ...] = ()
        if text:
            reply = await model.respond(TurnRequest(
                session_id="s", turn_id=f"t{i}", agent="default", language=u.language,
                user_text=text, history=(), tools=tools, today=today,
            ))
            calls = tuple((c.tool, c.arguments) for c in reply.calls)
        admitted, wrong = verdict(u, calls, words, engine.known_values, FloorConfig())
        heard = sum(1 for n in u.names if n in said)
        out.append(Outcome(u, text, heard, calls, admitted, wrong, tuple(words)))
    return out


def verdict(
    utterance: Utterance,
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    words: Sequence[Word],
    known: frozenset[str],
    floor: FloorConfig,
) -> tuple[bool, bool]:
    """(admitted without a question, admitted with names other than the ones said)."""
    admitted = bool(calls) and not doubtful_values(calls, words, known, floor)
    wrong = admitted and bool(utterance.names) and _accesses(calls) != set(utterance.names)
    return admitted, wrong


def curve(
    outcomes: Sequence[Outcome], known: frozenset[str], thresholds: Sequence[float] = THRESHOLDS
) -> list[dict[str, float]]:
    """The trade-off as the floor's threshold moves: requests admitted without a question
    (rightly) against requests admitted with a wrong name."""
    named = [o for o in outcomes if o.utterance.names]
    points: list[dict[str, float]] = []
    for threshold in thresholds:
        floor = FloorConfig(confirm_below=threshold)
        verdicts = [verdict(o.utterance, o.calls, o.words, known, floor) for o in named]
        points.append({
            "confirm_below": threshold,
            "admitted_without_question": round(
                sum(a and not w for a, w in verdicts) / max(len(named), 1), 4
            ),
            "admitted_wrong": sum(w for _, w in verdicts),
        })
    return points


def figures(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """The corpus's scores: names recognised, requests admitted, wrong admissions."""
    named = [o for o in outcomes if o.utterance.names]
    names = sum(len(o.utterance.names) for o in named)
    by_language: dict[str, dict[str, float]] = {}
    for language in sorted({o.utterance.language for o in named}):
        part = [o for o in named if o.utterance.language == language]
        by_language[language] = {
            "requests": len(part),
            "names_recognised": round(
                sum(o.names_heard for o in part) / sum(len(o.utterance.names) for o in part), 4
            ),
            "admitted_without_question": round(
                sum(o.admitted and not o.wrong for o in part) / len(part), 4
            ),
        }
    return {
        "utterances": len(outcomes),
        "requests_with_names": len(named),
        "voices": sorted({o.utterance.voice for o in outcomes}),
        "rates_wpm": sorted({o.utterance.rate for o in outcomes}),
        "names_recognised": round(sum(o.names_heard for o in named) / max(names, 1), 4),
        "admitted_without_question": round(
            sum(o.admitted and not o.wrong for o in named) / max(len(named), 1), 4
        ),
        "admitted_wrong": sum(o.wrong for o in outcomes),
        "asked": sum(not o.admitted for o in named),
        "by_language": by_language,
    }


async def run(seed: int = 7, calibration_seed: int = CALIBRATION_SEED) -> dict[str, Any]:
    """Build the corpus, decode it, score it; the trade-off curve on both splits."""
    started = time.perf_counter()
    utterances = corpus(seed)
    engine = demo_engine(primer(PRIMER_TEXT))
    synthesised = time.perf_counter()
    outcomes = await judge(engine, utterances)
    decoded = time.perf_counter()
    calibration = await judge(engine, corpus(calibration_seed))
    result = figures(outcomes)
    result["seconds"] = {
        "corpus": round(synthesised - started, 2),
        "decode_and_judge": round(decoded - synthesised, 2),
    }
    # What is asked of the recognizer on this corpus, beside what it reached.
    result["targets"] = {
        "names_recognised": {"goal": 0.95, "met": result["names_recognised"] >= 0.95},
        "admitted_without_question": {
            "goal": 0.90, "met": result["admitted_without_question"] >= 0.90,
        },
        "admitted_wrong": {"goal": 0, "met": result["admitted_wrong"] == 0},
    }
    result["tradeoff"] = {
        "calibration_seed": calibration_seed,
        "calibration": curve(calibration, engine.known_values),
        "held_out_seed": seed,
        "held_out": curve(outcomes, engine.known_values),
    }
    result["misses"] = [
        {"voice": o.utterance.voice, "rate": o.utterance.rate, "said": o.utterance.text,
         "heard": o.transcript, "admitted": o.admitted, "wrong": o.wrong}
        for o in outcomes
        if o.utterance.names and (o.names_heard < len(o.utterance.names) or not o.admitted)
    ]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    result = asyncio.run(run(args.seed))
    result["machine"] = machine()
    result["when"] = datetime.now(UTC).isoformat(timespec="seconds")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    keys = ("names_recognised", "admitted_without_question", "admitted_wrong", "asked", "seconds",
            "targets", "tradeoff")
    summary = {k: result[k] for k in keys}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
