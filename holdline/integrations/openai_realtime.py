"""holdline for OpenAI Realtime sessions (the Agents SDK's `RealtimeAgent`/`RealtimeSession`):
durable tools, the caller's clocks, playback truth, and closings said when holdline decides.

    bridge = HoldlineRealtime(session)
    agent = RealtimeAgent(name="assistant", instructions=..., tools=await bridge.tools())
    realtime = await RealtimeRunner(agent).run(model_config=bridge.model_config({...}))
    async with realtime:
        await bridge.start(realtime)
        async for event in realtime:
            await bridge.observe(event)       # before or after the app's own handling
            ...                               # play audio; feed bridge.tracker as it plays
    await bridge.aclose()

- Tools: each holdline tool is a `FunctionTool`; the model's call goes to
  `POST .../tool-calls` under the call id the model gave, and the model gets holdline's
  honest output at once (started, not done). The admission runs in a task the bridge owns,
  not in the SDK's tool task: the SDK cancels its tool tasks a second after the session
  closes, and a call the model made is holdline's from then on (`aclose` waits for it).
- Bad calls: arguments that are not one JSON object never reach holdline, and a tool the
  agent does not have (the SDK reports "Tool X not found") is not admitted either: the model
  is told nothing started and asked to apologise (the apology path).
- Clocks: the server's `input_audio_buffer.speech_started/stopped` become `user_speaking`
  signals, the agent's audio and its playback `agent_speaking`.
- Deliveries: a `delivery.say` waits until the caller is quiet (unless urgent) and the model
  is idle (no response generating, everything played), then is sent as a `response.create`
  whose instructions are the closing and whose metadata carries the delivery id. It stays
  in the conversation (so the model knows the caller was told, and a barge-in truncates it
  to what played), and the SDK queues it behind any response in flight. With
  `speak="model"` the instructions are the facts, for the session's model to phrase.
- Updates that found no proactive window (no call was up, or the agent was restarted) are
  read once when the bridge starts (`GET .../pending`) and said on this call the same way,
  one at a time with the pushed ones, each acknowledged as it played: a caller who calls
  back hears the result once, whatever happened to the call before.
- Playback truth: `tracker` (a `RealtimePlaybackTracker`) is fed by the app's player (for a
  phone, Twilio's returned marks). `spoken` once all of the closing's audio played;
  `unheard` with the words heard when the SDK reports the audio interrupted (a barge-in),
  and holdline decides again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agents import FunctionTool, Tool
from agents.realtime import (
    RealtimeModelConfig,
    RealtimeSession,
    RealtimeSessionEvent,
)
from agents.realtime.model_inputs import RealtimeModelSendRawMessage
from agents.tool_context import ToolContext

from holdline.client import AckStatus, AgentStream, DeliverySay, SessionClient, ToolCall

from ._common import Outbox, SignalPump, SpeakMode, ToolSpec, agent_tools, call_tool, log
from ._realtime_parts import (
    APOLOGY_OUTPUT,
    HeardTracker,
    Outgoing,
    audio_ms,
    instructions_for,
    malformed,
)

__all__ = ["HeardTracker", "HoldlineRealtime", "SpeakMode", "audio_ms"]

# The metadata key a closing's response carries.
DELIVERY_KEY = "holdline_delivery_id"
# A closing the model never started within this long is given back to holdline (unheard).
SAY_TIMEOUT_S = 30.0


class HoldlineRealtime:
    """Bridges one Realtime session to one holdline session (see the module docstring)."""

    def __init__(
        self,
        session: SessionClient,
        *,
        after: int | None = None,
        speak: SpeakMode = "text",
        tracker: HeardTracker | None = None,
        admission_grace_s: float = 10.0,
    ) -> None:
        self.session = session
        self.tracker = tracker or HeardTracker()
        self.tracker.listeners.append(self._on_played)
        self._after = after
        self._speak = speak
        self._grace_s = admission_grace_s
        self._signals = SignalPump(session)
        self._acks = Outbox("holdline-acks")
        self._admissions: set[asyncio.Task[str]] = set()
        self._known: set[str] = set()
        self._realtime: RealtimeSession | None = None
        self._stream: AgentStream | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending_task: asyncio.Task[None] | None = None
        # One closing at a time, pushed or pending.
        self._saying = asyncio.Lock()
        self._spoken: set[str] = set()
        self._current: Outgoing | None = None
        self._finished = asyncio.Event()
        # Set on anything that may end a wait for the caller's quiet or the model's idle.
        self._changed = asyncio.Event()
        self._user_quiet = asyncio.Event()
        self._user_quiet.set()
        self._responding: set[str] = set()
        self._received: dict[str, float] = {}
        self._last_user_text: str | None = None

    # -- tools ------------------------------------------------------------------------------

    async def tools(self) -> list[Tool]:
        """The active holdline agent's tools as `FunctionTool`s for a `RealtimeAgent`."""
        specs = await agent_tools(self.session)
        self._known = {spec.name for spec in specs}
        return [self._tool(spec) for spec in specs]

    def _tool(self, spec: ToolSpec) -> FunctionTool:
        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            return await self.call(context.tool_call_id, spec.name, arguments)

        return FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=spec.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    async def call(self, tool_call_id: str, name: str, arguments: str) -> str:
        """One call the model made: checked, then admitted by holdline in a task this bridge
        owns (a cancelled SDK tool task leaves it running); the model's output either way."""
        reason = malformed(name, arguments, self._known)
        if reason is not None:
            log.info("realtime: malformed call %s (%s): apology", tool_call_id, reason)
            return APOLOGY_OUTPUT.format(reason=reason)
        call = ToolCall(tool_call_id=tool_call_id, name=name, arguments=arguments or "{}")
        task = asyncio.get_running_loop().create_task(
            call_tool(self.session, call, self._last_user_text), name=f"holdline-admit-{name}"
        )
        self._admissions.add(task)
        task.add_done_callback(self._admissions.discard)
        return await asyncio.shield(task)

    # -- lifecycle --------------------------------------------------------------------------

    def model_config(self, config: RealtimeModelConfig | None = None) -> RealtimeModelConfig:
        """`config` with this bridge's playback tracker in it."""
        merged: RealtimeModelConfig = {**(config or {})}
        merged["playback_tracker"] = self.tracker
        return merged

    async def start(self, realtime: RealtimeSession) -> None:
        """Open holdline's agent channel and say its deliveries through `realtime`."""
        self._realtime = realtime
        self._signals.start()
        self._acks.start()
        stream = self.session.agent_stream(after=self._after)
        await stream.__aenter__()
        self._stream = stream
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._deliver(stream), name="holdline-deliveries")
        self._pending_task = loop.create_task(self._say_pending(), name="holdline-pending")

    async def aclose(self) -> None:
        """Stop saying deliveries; admissions in flight finish (bounded), reports go out."""
        for task in (self._task, self._pending_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._pending_task = None
        if self._admissions:
            await asyncio.wait(set(self._admissions), timeout=self._grace_s)
        await self._acks.drain(2.0)
        await self._acks.stop()
        await self._signals.drain(1.0)
        await self._signals.stop()
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    @property
    def admissions_in_flight(self) -> int:
        """Calls sent to holdline whose answer has not come back yet."""
        return len(self._admissions)

    # -- events -----------------------------------------------------------------------------

    async def observe(self, event: RealtimeSessionEvent) -> None:
        """Look at one session event (the app keeps handling it as it likes)."""
        self._changed.set()
        if event.type == "raw_model_event" and event.data.type == "raw_server_event":
            await self._on_server_event(event.data.data)
        elif event.type == "audio":
            self._on_audio(event.audio.response_id, event.item_id, len(event.audio.data))
        elif event.type == "audio_interrupted":
            self._on_interrupted(event.item_id)
        elif event.type == "error" and isinstance(event.error, dict):
            message = str(event.error.get("message", ""))
            if message.startswith("Tool ") and message.endswith(" not found"):
                await self._apologise(message)

    async def _on_server_event(self, data: dict[str, Any]) -> None:
        self._changed.set()
        kind = data.get("type")
        if kind == "input_audio_buffer.speech_started":
            self._user_quiet.clear()
            self._signals.send(user_speaking=True)
        elif kind == "input_audio_buffer.speech_stopped":
            self._user_quiet.set()
            self._signals.send(user_speaking=False)
        elif kind == "conversation.item.input_audio_transcription.completed":
            self._last_user_text = str(data.get("transcript") or "") or None
        elif kind == "response.created":
            response = data.get("response") or {}
            response_id = str(response.get("id"))
            self._responding.add(response_id)
            outgoing = self._current
            metadata = response.get("metadata") or {}
            if outgoing is not None and metadata.get(DELIVERY_KEY) == outgoing.say.delivery_id:
                outgoing.response_id = response_id
        elif kind == "response.output_audio_transcript.delta":
            outgoing = self._current
            if outgoing is not None and data.get("response_id") == outgoing.response_id:
                outgoing.transcript += str(data.get("delta", ""))
        elif kind == "response.done":
            response = data.get("response") or {}
            self._responding.discard(str(response.get("id")))
            outgoing = self._current
            if outgoing is not None and response.get("id") == outgoing.response_id:
                outgoing.generated = True
                if outgoing.item_id is None:
                    # Done (cancelled, failed) before any audio: nothing was heard.
                    self._finish(outgoing, spoken=False)
                else:
                    self._check_played(outgoing)
            self._check_idle()

    def _on_audio(self, response_id: str | None, item_id: str, size: int) -> None:
        ms = audio_ms(self.tracker.audio_format, size)
        self._received[item_id] = self._received.get(item_id, 0.0) + ms
        self._signals.send(agent_speaking=True)
        outgoing = self._current
        if outgoing is None or response_id is None or response_id != outgoing.response_id:
            return
        outgoing.item_id = item_id
        outgoing.received_ms += ms
        if not outgoing.started:
            outgoing.started = True
            self._ack(outgoing.say, "started")

    def _on_interrupted(self, item_id: str) -> None:
        self._signals.send(agent_speaking=False)
        outgoing = self._current
        if outgoing is not None and outgoing.item_id == item_id:
            self._finish(outgoing, spoken=False)
        self._received.pop(item_id, None)
        self._check_idle()

    def _on_played(self, item_id: str) -> None:
        self._changed.set()
        outgoing = self._current
        if outgoing is not None and outgoing.item_id == item_id:
            self._check_played(outgoing)
        self._check_idle()

    def _check_played(self, outgoing: Outgoing) -> None:
        if outgoing.item_id is None or not outgoing.generated:
            return
        # A millisecond of slack for the rounding of byte counts into milliseconds.
        if self.tracker.played_ms(outgoing.item_id) + 1.0 >= outgoing.received_ms:
            self._finish(outgoing, spoken=True)

    def _playing(self) -> bool:
        return any(self.tracker.played_ms(item) + 1.0 < ms for item, ms in self._received.items())

    def _check_idle(self) -> None:
        if not self._responding and not self._playing():
            # Nothing is generating and everything played: forget the items (a long call
            # would otherwise keep one entry per reply).
            self._received.clear()
            self._signals.send(agent_speaking=False)

    def _finish(self, outgoing: Outgoing, *, spoken: bool) -> None:
        if outgoing.finished:
            return
        outgoing.finished = True
        if spoken:
            self._spoken.add(outgoing.say.delivery_id)
            self._ack(outgoing.say, "spoken")
        else:
            played = self.tracker.played_ms(outgoing.item_id) if outgoing.item_id else 0.0
            self._ack(outgoing.say, "unheard", heard_text=outgoing.heard_words(played))
        self._finished.set()

    async def _apologise(self, reason: str) -> None:
        # The SDK answered an unknown tool itself without asking the model to go on: ask it
        # to apologise; holdline was never called.
        log.info("realtime: %s: apology, no admission", reason)
        await self._send_response(APOLOGY_OUTPUT.format(reason=reason), metadata={})

    # -- deliveries -------------------------------------------------------------------------

    async def _deliver(self, stream: AgentStream) -> None:
        async for say in stream:
            try:
                async with self._saying:
                    await self._say(say)
            except Exception:  # noqa: BLE001 - unacknowledged: holdline puts it back and decides again
                log.warning("delivery %s not said", say.delivery_id, exc_info=True)

    async def _say_pending(self) -> None:
        """The updates waiting for the session's next turn, said on this call."""
        try:
            pending = await self.session.pending()
        except Exception:  # noqa: BLE001 - they stay pending for the next turn or call
            log.warning("pending updates not read", exc_info=True)
            return
        for item in pending.deliveries:
            say = DeliverySay(
                seq=0, delivery_id=item.delivery_id, batch_id=None, text=item.text,
                facts=list(item.facts), priority="normal", interrupt=False,
            )
            try:
                async with self._saying:
                    await self._say(say)
            except Exception:  # noqa: BLE001 - unacknowledged: it stays pending
                log.warning("pending update %s not said", item.delivery_id, exc_info=True)

    async def _say(self, say: DeliverySay) -> None:
        if say.delivery_id in self._spoken:
            # Read as pending and pushed as well (the call came back inside the window).
            return
        if not say.interrupt:
            # holdline chose the moment from signals a few hundred ms old; the server's VAD
            # is fresher: never over the caller.
            await self._user_quiet.wait()
            await self._wait_idle()
        elif self._realtime is not None:
            await self._realtime.interrupt()
        outgoing = Outgoing(say)
        self._current = outgoing
        self._finished.clear()
        await self._send_response(
            instructions_for(say, self._speak), metadata={DELIVERY_KEY: say.delivery_id}
        )
        try:
            await asyncio.wait_for(self._finished.wait(), SAY_TIMEOUT_S)
        except TimeoutError:
            self._finish(outgoing, spoken=False)
        finally:
            self._current = None

    async def _wait_idle(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SAY_TIMEOUT_S
        while self._responding or self._playing() or not self._user_quiet.is_set():
            if loop.time() > deadline and self._user_quiet.is_set():
                # Audio that never finishes playing: the app is not feeding `tracker`.
                log.warning("realtime: audio never finished playing; is bridge.tracker fed?")
                return
            self._changed.clear()
            # Bounded: the tracker may be fed without telling us (a player of the app's own).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), 0.25)

    async def _send_response(self, instructions: str, metadata: dict[str, str]) -> None:
        realtime = self._realtime
        if realtime is None:
            return
        response: dict[str, Any] = {"instructions": instructions, "tool_choice": "none"}
        if metadata:
            response["metadata"] = metadata
        await realtime.model.send_event(RealtimeModelSendRawMessage(message={
            "type": "response.create", "other_data": {"response": response},
        }))

    def _ack(self, say: DeliverySay, status: AckStatus, heard_text: str | None = None) -> None:
        stream = self._stream
        delivery_id = say.delivery_id

        async def send() -> None:
            if stream is not None:
                await stream.ack(delivery_id, status, heard_text=heard_text)
            else:
                await self.session.ack(delivery_id, status, heard_text=heard_text)

        self._acks.put(send)
