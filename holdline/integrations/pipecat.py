"""holdline for Pipecat: durable tools, the conversation's clocks and playback truth.

Put one `HoldlineProcessor` between the LLM and the TTS service::

    holdline = HoldlineProcessor(session, serializer=serializer)
    tools = await holdline.register_tools(llm)          # GET .../tools → llm.register_function
    context = LLMContext(messages, tools=tools)
    Pipeline([transport.input(), stt, pair.user(), llm, holdline, tts,
              transport.output(), pair.assistant()])

- Tools: every call goes to `POST .../tool-calls`; the honest `output` is the call's result
  at once (registered with `cancel_on_interruption=False`: a barge-in never cancels the
  admission, which is idempotent by `tool_call_id` anyway).
- Clocks: `UserStarted/StoppedSpeakingFrame` and `BotStarted/StoppedSpeakingFrame` become
  signals.
- Deliveries: a `delivery.say` from the agent stream is pushed as a `TTSSpeakFrame` (or, with
  `speak="model"`, as an `LLMMessagesAppendFrame(run_llm=True)` over the facts).
- Playback truth: with `HoldlineTwilioSerializer`, a Twilio `mark` follows the delivery's
  audio and `spoken` is acknowledged when Twilio returns it with no `InterruptionFrame`
  (that is, no `clear`) in between. With any other serializer, `spoken` is acknowledged on
  the `BotStoppedSpeakingFrame` that ends the delivery's speech without an interruption.
  An `InterruptionFrame` while a delivery is out acknowledges `unheard` with the words that
  fit in the time it played.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputTransportMessageFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    OutputTransportMessageFrame,
    StartFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.services.llm_service import FunctionCallParams, LLMService

from holdline.client import (
    AckStatus,
    AgentStream,
    DeliverySay,
    SessionClient,
    ToolCall,
)

from ._common import (
    Outbox,
    SignalPump,
    SpeakMode,
    agent_tools,
    call_tool,
    facts_prompt,
    heard_prefix,
)

__all__ = ["HoldlineProcessor", "HoldlineTwilioSerializer", "SpeakMode"]

# espeak-ng's default rate (175 wpm) and most neural voices sit near this.
DEFAULT_WORDS_PER_SECOND = 2.7


class HoldlineTwilioSerializer(TwilioFrameSerializer):
    """Pipecat's Twilio serializer, plus the one thing it drops: Twilio's returned `mark`
    becomes an `InputTransportMessageFrame`, so playback can be confirmed as Twilio saw it."""

    @property
    def stream_sid(self) -> str:
        """The stream the marks are named on."""
        return self._stream_sid

    def mark(self, name: str) -> dict[str, Any]:
        """The outbound `mark` message that follows audio named `name`."""
        return {"event": "mark", "streamSid": self._stream_sid, "mark": {"name": name}}

    async def deserialize(self, data: str | bytes) -> Frame | None:
        """Twilio's frames as Pipecat's, with `mark` kept."""
        try:
            message = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return await super().deserialize(data)
        if isinstance(message, dict) and message.get("event") == "mark":
            return InputTransportMessageFrame(message=message)
        return await super().deserialize(data)


@dataclass
class _Outgoing:
    """The delivery being said: at most one at a time."""

    say: DeliverySay
    text: str
    pushed_at: float
    started_at: float | None = None
    waiting_for_reply: bool = False
    done: asyncio.Event | None = None


class HoldlineProcessor(FrameProcessor):
    """Bridges one Pipecat pipeline to one holdline session (see the module docstring)."""

    def __init__(
        self,
        session: SessionClient,
        *,
        serializer: HoldlineTwilioSerializer | None = None,
        speak: SpeakMode = "text",
        words_per_second: float = DEFAULT_WORDS_PER_SECOND,
        after: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._session = session
        self._serializer = serializer
        self._speak = speak
        self._wps = words_per_second
        self._after = after
        self._signals = SignalPump(session)
        self._acks = Outbox("holdline-acks")
        self._deliveries: asyncio.Task[None] | None = None
        self._current: _Outgoing | None = None
        self._last_user_text: str | None = None
        # Set while the caller is not talking, as Pipecat's own turn frames say.
        self._user_quiet = asyncio.Event()
        self._user_quiet.set()
        self._stream: AgentStream | None = None

    @property
    def confirms_with_marks(self) -> bool:
        """True when `spoken` waits for Twilio's returned mark (else BotStoppedSpeaking)."""
        return self._serializer is not None

    async def register_tools(self, llm: LLMService[Any]) -> ToolsSchema:
        """Register every tool the session's agent may call; return their schemas for the
        `LLMContext`, so the model sees holdline's own."""
        schemas: list[FunctionSchema] = []
        for spec in await agent_tools(self._session):
            llm.register_function(spec.name, self._call_tool, cancel_on_interruption=False)
            schemas.append(FunctionSchema(
                name=spec.name,
                description=spec.description,
                properties=dict(spec.parameters.get("properties", {})),
                required=list(spec.parameters.get("required", [])),
            ))
        return ToolsSchema(standard_tools=schemas)

    async def _call_tool(self, params: FunctionCallParams) -> None:
        call = ToolCall(
            tool_call_id=params.tool_call_id,
            name=params.function_name,
            arguments=dict(params.arguments),
        )
        await params.result_callback(
            await call_tool(self._session, call, self._last_user_text)
        )

    # -- frames ---------------------------------------------------------------------------

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        """Observe every frame, act on a few, pass them all on."""
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            self._signals.start()
            self._acks.start()
            self._deliveries = self.create_task(self._run_deliveries(), "holdline-deliveries")
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._shutdown()
        elif isinstance(frame, UserStartedSpeakingFrame):
            self._user_quiet.clear()
            self._signals.send(user_speaking=True)
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._user_quiet.set()
            self._signals.send(user_speaking=False)
        elif isinstance(frame, TranscriptionFrame):
            self._last_user_text = frame.text
        elif isinstance(frame, BotStartedSpeakingFrame):
            self._signals.send(agent_speaking=True)
            await self._on_bot_started()
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self._signals.send(agent_speaking=False)
            if not self.confirms_with_marks:
                await self._finish(spoken=True)
        elif isinstance(frame, InterruptionFrame):
            await self._finish(spoken=False)
        elif isinstance(frame, InputTransportMessageFrame):
            await self._on_transport_message(frame.message)
        elif isinstance(frame, LLMFullResponseEndFrame) and direction == FrameDirection.DOWNSTREAM:
            # The end goes first: it flushes the TTS's text aggregation, so the mark that
            # follows is queued behind the reply's audio, not ahead of it.
            await self.push_frame(frame, direction)
            await self._after_model_reply()
            return
        await self.push_frame(frame, direction)

    async def _shutdown(self) -> None:
        if self._deliveries is not None:
            await self.cancel_task(self._deliveries)
            self._deliveries = None
        await self._acks.drain(2.0)
        await self._acks.stop()
        await self._signals.stop()

    # -- deliveries -----------------------------------------------------------------------

    async def _run_deliveries(self) -> None:
        # The stream reconnects by itself and resumes after the last seq it saw; a new
        # process (after a crash) starts with `after=None` and holdline re-sends whatever
        # is not acknowledged, so a closing that finished while the bot was down is said.
        async with self._session.agent_stream(after=self._after) as stream:
            self._stream = stream
            async for say in stream:
                if not say.interrupt:
                    # holdline chose the moment from signals that may be a few hundred ms
                    # old; the pipeline's own turn frames are fresher. A say that lands while
                    # the caller talks waits for the end of that turn instead of being pushed
                    # into their speech (and cut at once).
                    await self._user_quiet.wait()
                outgoing = _Outgoing(say, say.text, time.monotonic(), done=asyncio.Event())
                self._current = outgoing
                await self._say(outgoing)
                assert outgoing.done is not None
                await outgoing.done.wait()

    async def _say(self, outgoing: _Outgoing) -> None:
        say = outgoing.say
        if say.interrupt:
            # Pipecat leaves these two base methods unannotated.
            await self.broadcast_interruption()  # type: ignore[no-untyped-call]
        if self._speak == "model" and say.facts:
            outgoing.waiting_for_reply = True
            # Downstream, behind any audio still queued, to the assistant aggregator: it
            # appends the facts and runs the LLM once the bot is quiet; the reply comes back
            # down through this processor, and its end is where the mark goes.
            await self.push_frame(
                LLMMessagesAppendFrame(
                    messages=[{"role": "system", "content": facts_prompt(say.text, say.facts)}],
                    run_llm=True,
                )
            )
            return
        await self.push_frame(TTSSpeakFrame(text=say.text))
        await self._push_mark(say.delivery_id)

    async def _push_mark(self, name: str) -> None:
        # Queued behind the speech's audio (the TTS service keeps order), so Twilio returns
        # it only once what came before it has played.
        if self._serializer is not None:
            await self.push_frame(OutputTransportMessageFrame(message=self._serializer.mark(name)))

    async def _after_model_reply(self) -> None:
        outgoing = self._current
        if outgoing is not None and outgoing.waiting_for_reply:
            outgoing.waiting_for_reply = False
            await self._push_mark(outgoing.say.delivery_id)

    async def _on_bot_started(self) -> None:
        outgoing = self._current
        if outgoing is None or outgoing.started_at is not None or outgoing.waiting_for_reply:
            return
        outgoing.started_at = time.monotonic()
        await self._ack(outgoing, "started")

    async def _on_transport_message(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("event") != "mark":
            return
        outgoing = self._current
        name = (message.get("mark") or {}).get("name")
        if outgoing is not None and name == outgoing.say.delivery_id:
            # A mark back before any of the delivery's audio played means nothing was heard
            # (no audio came out): unheard, so holdline decides again instead of waiting.
            await self._finish(spoken=outgoing.started_at is not None)

    async def _finish(self, *, spoken: bool) -> None:
        outgoing = self._current
        if outgoing is None:
            return
        if spoken and (outgoing.started_at is None or outgoing.waiting_for_reply):
            return  # a stop that belongs to earlier speech
        self._current = None
        if spoken:
            await self._ack(outgoing, "spoken")
        else:
            started = outgoing.started_at
            played = 0.0 if started is None else time.monotonic() - started
            heard = heard_prefix(outgoing.text, played, self._wps)
            await self._ack(outgoing, "unheard", heard_text=heard)
        assert outgoing.done is not None
        outgoing.done.set()

    async def _ack(
        self, outgoing: _Outgoing, status: AckStatus, heard_text: str | None = None
    ) -> None:
        delivery_id = outgoing.say.delivery_id
        stream = self._stream

        async def send() -> None:
            if stream is not None:
                await stream.ack(delivery_id, status, heard_text=heard_text)
            else:
                await self._session.ack(delivery_id, status, heard_text=heard_text)

        # Off the frame loop: audio never waits for holdline to confirm an acknowledgement.
        self._acks.put(send)

    async def cleanup(self) -> None:
        """Stop the delivery task with the processor."""
        with contextlib.suppress(Exception):
            await self._shutdown()
        await super().cleanup()  # type: ignore[no-untyped-call]
