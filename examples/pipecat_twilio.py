"""A Pipecat phone bot whose tools run on holdline, over the Twilio Media Streams protocol.

    .venv/bin/python examples/pipecat_twilio.py --port 8765 --holdline http://127.0.0.1:8080

serves `WS /v1/telephony/twilio` (what Twilio's `<Connect><Stream>` dials, and what the
project's phone in `tests/voice/phone.py` dials). A `start` whose `customParameters` carry
`{session_id, token}` continues that holdline session; `{user_id, tenant_id?}` opens one.

Offline on purpose: the speech recogniser and the model are scripted (Pipecat's own
`SegmentedSTTService` and `LLMService` bases), the voice is espeak-ng (a `TTSService`), the
VAD is Pipecat's Silero. Everything else is Pipecat as shipped: `FastAPIWebsocketTransport`,
the Twilio serializer (with holdline's mark-aware subclass), the context aggregators.

- STT: the Nth speech segment of a call is heard as the Nth line of `--script` ("mm-hm"
  past the end), so a test knows what the bot "understood".
- LLM: "... access to A, B and C" → one `provision_access` call; a tool result → a short
  spoken line that keeps to its output (started, or the refusal); a system message with
  holdline's facts (`--speak model`) → "Update: <summary> (<status>)"; anything else →
  silence (a caller talking over results gets no chatter).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import uvicorn
from fastapi import FastAPI, WebSocket
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    FunctionCallFromLLM,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.services.llm_service import LLMService
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.services.tts_service import TTSService
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)
from pipecat.turns.user_stop.speech_timeout_user_turn_stop_strategy import (
    SpeechTimeoutUserTurnStopStrategy,
)
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.utils.time import time_now_iso8601
from pipecat.workers.runner import WorkerRunner

from holdline.client import HoldlineClient, SessionClient
from holdline.integrations.pipecat import HoldlineProcessor, HoldlineTwilioSerializer, SpeakMode

DEFAULT_SCRIPT = ("give me access to notion and gitlab",)
_REQUEST = re.compile(r"access to (?P<names>[a-z0-9 ,_-]+)", re.IGNORECASE)
_FACT = re.compile(r"^- (?P<tool>[a-z_]+) \((?P<status>[a-z_]+)\): (?P<summary>.+)$", re.MULTILINE)


def resources(text: str) -> list[str]:
    """The names in "access to A, B and C"."""
    found = _REQUEST.search(text)
    if found is None:
        return []
    parts = re.split(r",|\band\b", found["names"])
    return [p.strip().replace(" ", "-") for p in parts if p.strip()]


class EspeakTTSService(TTSService):
    """Speech from espeak-ng (a local binary, no network), at espeak's own 22.05 kHz."""

    def __init__(self, *, voice: str = "en-us", words_per_minute: int = 175, **kwargs: Any):
        super().__init__(push_start_frame=True, push_stop_frames=True, **kwargs)
        self._voice = voice
        self._wpm = words_per_minute

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """One WAV from espeak-ng, streamed as audio frames."""
        process = await asyncio.create_subprocess_exec(
            "espeak-ng", "-v", self._voice, "-s", str(self._wpm), "--stdout", text,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        wav, _ = await process.communicate()
        if process.returncode != 0 or not wav:
            yield ErrorFrame(error=f"espeak-ng failed ({process.returncode})")
            return

        async def chunks() -> AsyncGenerator[bytes, None]:
            yield wav

        async for frame in self._stream_audio_frames_from_iterator(
            chunks(), strip_wav_header=True, context_id=context_id
        ):
            yield frame


class ScriptedSTTService(SegmentedSTTService):
    """Hears the Nth speech segment as the Nth line of its script."""

    def __init__(self, script: tuple[str, ...], **kwargs: Any):
        super().__init__(**kwargs)
        self._script = list(script)
        self._heard = 0

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """The next line."""
        text = self._script[self._heard] if self._heard < len(self._script) else "mm-hm"
        self._heard += 1
        yield TranscriptionFrame(text=text, user_id="caller", timestamp=time_now_iso8601())


def _content(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class ScriptedLLMService(LLMService):
    """A deterministic model: one tool call per request, says tool results, else silent."""

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Answer each context; pass everything else on."""
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            await self._answer(frame.context)
        else:
            await self.push_frame(frame, direction)

    async def _answer(self, context: LLMContext) -> None:
        messages = [m for m in context.get_messages() if isinstance(m, dict)]
        if not messages:
            return
        last = messages[-1]
        role = last.get("role")
        await self.push_frame(LLMFullResponseStartFrame())
        if role == "tool":
            await self._say(_spoken_acceptance(_tool_text(_content(last))))
        elif role in ("system", "developer") and (facts := _FACT.findall(_content(last))):
            # holdline's facts (speak="model"): phrased in this model's own words
            await self._say("Update: " + "; ".join(f"{s} ({st})" for _, st, s in facts))
        elif role == "user" and (names := resources(_content(last))):
            call = FunctionCallFromLLM(
                function_name="provision_access",
                tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
                arguments={"accesses": names},
                context=context,
            )
            await self.run_function_calls([call])
        await self.push_frame(LLMFullResponseEndFrame())

    async def _say(self, text: str) -> None:
        if text:
            await self.push_frame(LLMTextFrame(text))


def _spoken_acceptance(output: str) -> str:
    # holdline's output is written for a model (operation ids, instructions); a model turns
    # it into a line for the ear. This one does it by rule, keeping to what the output says.
    if output.startswith("Accepted"):
        return "I have started on that. I will tell you when it is done."
    return output.split(". ", 1)[0]


def _tool_text(content: str) -> str:
    # The aggregator stores a result as JSON; holdline's output is a plain string.
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return content
    return value if isinstance(value, str) else ""


async def _session_for(hl: HoldlineClient, params: dict[str, Any]) -> SessionClient:
    if params.get("session_id") and params.get("token"):
        return hl.session(str(params["session_id"]), str(params["token"]))
    return await hl.create_session(
        user_id=str(params.get("user_id") or f"caller-{uuid.uuid4().hex[:8]}"),
        tenant_id=params.get("tenant_id"),
    )


async def run_call(
    websocket: WebSocket, hl: HoldlineClient, script: tuple[str, ...], speak: SpeakMode = "text"
) -> None:
    """One call: a pipeline from the Twilio socket to holdline and back, until hang-up."""
    _, call = await parse_telephony_websocket(websocket)
    serializer = HoldlineTwilioSerializer(
        stream_sid=call["stream_id"],
        call_sid=call["call_id"],
        params=HoldlineTwilioSerializer.InputParams(auto_hang_up=False),
    )
    transport = FastAPIWebsocketTransport(
        websocket=websocket,
        params=FastAPIWebsocketParams(
            audio_in_enabled=True, audio_out_enabled=True, add_wav_header=False,
            serializer=serializer,
        ),
    )
    session = await _session_for(hl, dict(call.get("body") or {}))
    holdline = HoldlineProcessor(session, serializer=serializer, speak=speak)
    llm = ScriptedLLMService()
    tools = await holdline.register_tools(llm)
    context = LLMContext([{"role": "system", "content": "You are a helpful phone agent."}],
                         tools=tools)
    pair = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=SileroVADAnalyzer(params=VADParams(stop_secs=0.4)),
            user_turn_strategies=UserTurnStrategies(
                stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.3)]
            ),
        ),
    )
    pipeline = Pipeline([
        transport.input(), ScriptedSTTService(script), pair.user(), llm, holdline,
        EspeakTTSService(), transport.output(), pair.assistant(),
    ])
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(audio_in_sample_rate=8000, audio_out_sample_rate=8000),
        idle_timeout_secs=None,
        enable_rtvi=False,
    )

    @transport.event_handler("on_client_disconnected")  # type: ignore[untyped-decorator]  # pipecat leaves it unannotated
    async def _hung_up(_transport: Any, _client: Any) -> None:
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


def create_app(
    holdline_url: str, script: tuple[str, ...] = DEFAULT_SCRIPT, speak: SpeakMode = "text"
) -> FastAPI:
    """The bot's web app: one Twilio stream endpoint and a health check."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.websocket("/v1/telephony/twilio")
    async def twilio(websocket: WebSocket) -> None:
        await websocket.accept()
        async with HoldlineClient(holdline_url, api_key=os.environ.get("HOLDLINE_API_KEY")) as hl:
            await run_call(websocket, hl, script, speak)

    return app


def main() -> None:
    """`python examples/pipecat_twilio.py [--port] [--holdline] [--script a|b|c]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--holdline", default="http://127.0.0.1:8080", help="holdline's surface")
    parser.add_argument("--script", default="|".join(DEFAULT_SCRIPT),
                        help="what the caller's segments are heard as, '|'-separated")
    parser.add_argument("--speak", choices=("text", "model"), default="text",
                        help="say holdline's closing, or let the bot's model phrase the facts")
    args = parser.parse_args()
    app = create_app(args.holdline, tuple(args.script.split("|")), args.speak)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
