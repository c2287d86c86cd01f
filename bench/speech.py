"""Offline recognition of the demo's requests on telephone speech: names heard, requests
admitted without a question, requests admitted with a wrong name.

`.venv/bin/python -m bench.speech` synthesises the corpus (testkit/speech_corpus.py:
espeak-ng, four English and two Spanish voices, three rates, telephone band, line noise at
20 dB SNR, 8 kHz μ-law), decodes every utterance through the engine's session API with the
demo's vocabulary, asks the mock model what it would call, and lets the voice floor's own
rule (`floor.doubtful_values`) decide: admitted as heard, or asked "did you say ...?".
Results: `bench/results/speech.json`.
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

from libs.models.mock import MockModel

from bench.common import machine
from libs.models.interface import TurnRequest
from libs.tools import default_registry
from services.interaction_surface.chat.conversation import tool_spec
from services.interaction_surface.voice.codec import ulaw_to_pcm16
from services.interaction_surface.voice.engines.base import heard_words
from services.interaction_surface.voice.engines.pocketsphinx import PocketsphinxStt
from services.interaction_surface.voice.floor import FloorConfig, doubtful_values, normalise
from services.interaction_surface.voice.wiring import PRIMER_TEXT
from testkit.speech_corpus import Utterance, corpus, demo_vocabulary, primer

RESULTS = Path(__file__).parent / "results" / "speech.json"


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
        doubtful = doubtful_values(calls, words, engine.known_values, FloorConfig())
        admitted = bool(calls) and not doubtful
        wrong = admitted and bool(u.names) and _accesses(calls) != set(u.names)
        heard = sum(1 for n in u.names if n in said)
        out.append(Outcome(u, text, heard, calls, admitted, wrong))
    return out


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


async def run(seed: int = 7) -> dict[str, Any]:
    """Build the corpus, decode it, score it."""
    started = time.perf_counter()
    utterances = corpus(seed)
    engine = demo_engine(primer(PRIMER_TEXT))
    synthesised = time.perf_counter()
    outcomes = await judge(engine, utterances)
    decoded = time.perf_counter()
    result = figures(outcomes)
    result["seconds"] = {
        "corpus": round(synthesised - started, 2),
        "decode_and_judge": round(decoded - synthesised, 2),
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
    keys = ("names_recognised", "admitted_without_question", "admitted_wrong", "asked", "seconds")
    summary = {k: result[k] for k in keys}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
