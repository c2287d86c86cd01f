"""The smallest OpenAI Realtime agent on holdline: no phone, typed turns, audio "played" on a
clock (swap `ClockPlayer` for your sound device).

    OPENAI_API_KEY=... .venv/bin/python examples/openai_realtime_local.py \
        --holdline http://127.0.0.1:8080 "give me access to notion"

Each argument is sent as a user message. The model calls holdline's tools (answered "started"
at once); when the work completes, holdline decides the moment and the agent says the closing.
The player tells the SDK's playback tracker what played, which is how holdline learns that a
closing was heard (`spoken`) or cut (`unheard`). `--realtime-url` points at another Realtime
server. Stops after `--seconds`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from typing import Any

from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession

from holdline.client import HoldlineClient
from holdline.integrations.openai_realtime import HeardTracker, HoldlineRealtime, audio_ms


class ClockPlayer:
    """Plays the model's audio in real time, one chunk after the other, and reports each
    chunk to the tracker once its time has passed; an interruption drops what is queued."""

    def __init__(self, tracker: HeardTracker) -> None:
        self.tracker = tracker
        self._queue: asyncio.Queue[tuple[str, int, bytes]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._cuts = 0

    def start(self) -> None:
        """Begin playing."""
        self._task = asyncio.get_running_loop().create_task(self._play())

    def enqueue(self, item_id: str, content_index: int, audio: bytes) -> None:
        """Audio to play after what is queued."""
        self._queue.put_nowait((item_id, content_index, audio))

    def interrupt(self) -> None:
        """Drop what has not played (the chunk playing now included)."""
        self._cuts += 1
        while not self._queue.empty():
            self._queue.get_nowait()

    async def stop(self) -> None:
        """Stop playing."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _play(self) -> None:
        while True:
            item_id, index, audio = await self._queue.get()
            cuts = self._cuts
            await asyncio.sleep(audio_ms(self.tracker.audio_format, len(audio)) / 1000)
            if cuts == self._cuts:
                self.tracker.on_play_bytes(item_id, index, audio)


async def run(
    holdline_url: str, turns: list[str], seconds: float, url: str | None
) -> tuple[str, str]:
    """Open a holdline session, run one Realtime session over it, send `turns`; the
    session's id and token."""
    async with HoldlineClient(holdline_url, api_key=os.environ.get("HOLDLINE_API_KEY")) as hl:
        session = await hl.create_session(user_id="realtime-local")
        bridge = HoldlineRealtime(session)
        agent = RealtimeAgent(name="assistant", tools=await bridge.tools(),
                              instructions="Use the tools; a tool result means started, not done.")
        config: dict[str, Any] = {"api_key": os.environ.get("OPENAI_API_KEY", "unset")}
        if url:
            config["url"] = url
        player = ClockPlayer(bridge.tracker)
        realtime: RealtimeSession = await RealtimeRunner(agent).run(
            model_config=bridge.model_config(config)  # type: ignore[arg-type]
        )
        async with realtime:
            await bridge.start(realtime)
            player.start()

            async def events() -> None:
                async for event in realtime:
                    await bridge.observe(event)
                    if event.type == "audio":
                        player.enqueue(event.item_id, event.content_index, event.audio.data)
                    elif event.type == "audio_interrupted":
                        player.interrupt()
                    elif event.type == "history_added" and event.item.type == "message":
                        print(f"[{event.item.role}] {event.item}")

            pump = asyncio.create_task(events())
            for turn in turns:
                await realtime.send_message(turn)
            await asyncio.sleep(seconds)
            pump.cancel()
            await player.stop()
        await bridge.aclose()
        return session.session_id, session.token


def main() -> None:
    """`python examples/openai_realtime_local.py [--holdline] [--seconds] TURN...`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("turns", nargs="*", default=["give me access to notion"])
    parser.add_argument("--holdline", default="http://127.0.0.1:8080", help="holdline's surface")
    parser.add_argument("--realtime-url", default=None, help="a Realtime WebSocket URL")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to stay on")
    args = parser.parse_args()
    asyncio.run(run(args.holdline, args.turns, args.seconds, args.realtime_url))


if __name__ == "__main__":
    main()
