"""An OpenAI Realtime phone agent behind a Twilio number, whose tools run on holdline.

    OPENAI_API_KEY=... .venv/bin/python examples/openai_realtime_twilio.py --port 8765 \
        --holdline http://127.0.0.1:8080

Shaped like the Agents SDK's own Twilio example (`examples/realtime/twilio`): Twilio's
`<Connect><Stream>` (from `POST /incoming-call`) dials `WS /v1/telephony/twilio`; the call's
μ-law audio goes to a `RealtimeSession` as is, the model's audio comes back as `media`
frames, each followed by a `mark` whose return feeds the SDK's playback tracker. What this
adds is holdline:

- the agent's tools are holdline's (`HoldlineRealtime.tools()`), so a tool call is a durable
  operation and the model says "started", never "done";
- holdline decides when a result is said: its `delivery.say` becomes a response only when
  the caller is quiet and the agent idle, and the returned marks decide `spoken`/`unheard`;
- a barge-in (`audio_interrupted`) sends Twilio a `clear`; marks Twilio echoes for cleared
  audio are not counted as played, so holdline hears `unheard` with the words heard.

A `start` whose `customParameters` carry `{session_id, token}` continues that holdline
session (a call after a crash hears what is still pending); `{user_id, tenant_id?}` opens one.
`--realtime-url` points the SDK at another Realtime server (the tests' local one).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import uuid
from typing import Any

import uvicorn
from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession
from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import PlainTextResponse
from starlette.websockets import WebSocketDisconnect

from holdline.client import HoldlineClient, SessionClient
from holdline.integrations.openai_realtime import HoldlineRealtime

INSTRUCTIONS = (
    "You are a phone agent. Use the tools for what the caller asks. A tool's result says the "
    "work has started: say so briefly, never that it is done. Keep answers short."
)


class TwilioCall:
    """One Twilio media stream bridged to one `RealtimeSession` and one holdline session."""

    def __init__(self, websocket: WebSocket, bridge: HoldlineRealtime) -> None:
        self.websocket = websocket
        self.bridge = bridge
        self.stream_sid = ""
        self._marks: dict[str, tuple[str, int, int]] = {}
        self._count = 0

    async def send(self, message: dict[str, Any]) -> None:
        """One frame to Twilio."""
        await self.websocket.send_text(json.dumps(message))

    async def on_event(self, realtime: RealtimeSession, event: Any) -> None:
        """The session's audio and interruptions, played through Twilio."""
        await self.bridge.observe(event)
        if event.type == "audio":
            self._count += 1
            name = f"m{self._count}"
            self._marks[name] = (event.item_id, event.content_index, len(event.audio.data))
            payload = base64.b64encode(event.audio.data).decode()
            await self.send({"event": "media", "streamSid": self.stream_sid,
                             "media": {"payload": payload}})
            await self.send({"event": "mark", "streamSid": self.stream_sid,
                             "mark": {"name": name}})
        elif event.type == "audio_interrupted":
            # Twilio echoes every pending mark on a clear: that audio was not heard.
            self._marks.clear()
            await self.send({"event": "clear", "streamSid": self.stream_sid})

    async def on_twilio(self, realtime: RealtimeSession, message: dict[str, Any]) -> bool:
        """One frame from Twilio; False once the call ended."""
        kind = message.get("event")
        if kind == "media":
            await realtime.send_audio(base64.b64decode(message["media"]["payload"]))
        elif kind == "mark":
            played = self._marks.pop(str((message.get("mark") or {}).get("name")), None)
            if played is not None:
                item_id, content_index, size = played
                self.bridge.tracker.on_play_bytes(item_id, content_index, b"\x00" * size)
        elif kind == "stop":
            return False
        return True


async def _session_for(hl: HoldlineClient, params: dict[str, Any]) -> SessionClient:
    if params.get("session_id") and params.get("token"):
        return hl.session(str(params["session_id"]), str(params["token"]))
    return await hl.create_session(
        user_id=str(params.get("user_id") or f"caller-{uuid.uuid4().hex[:8]}"),
        tenant_id=params.get("tenant_id"),
    )


async def _start_frame(websocket: WebSocket) -> dict[str, Any]:
    while True:
        message = json.loads(await websocket.receive_text())
        if message.get("event") == "start":
            start: dict[str, Any] = message["start"]
            return start


async def run_call(websocket: WebSocket, hl: HoldlineClient, realtime_url: str | None) -> None:
    """One call, from Twilio's `start` to its `stop` (or hang-up)."""
    start = await _start_frame(websocket)
    session = await _session_for(hl, dict(start.get("customParameters") or {}))
    bridge = HoldlineRealtime(session)
    agent = RealtimeAgent(name="phone", instructions=INSTRUCTIONS, tools=await bridge.tools())
    config: dict[str, Any] = {
        "api_key": os.environ.get("OPENAI_API_KEY", "unset"),
        "initial_model_settings": {
            "input_audio_format": "g711_ulaw",
            "output_audio_format": "g711_ulaw",
            "turn_detection": {"type": "server_vad", "interrupt_response": True,
                               "create_response": True},
        },
    }
    if realtime_url:
        config["url"] = realtime_url
    call = TwilioCall(websocket, bridge)
    call.stream_sid = str(start.get("streamSid", ""))
    realtime = await RealtimeRunner(agent).run(model_config=bridge.model_config(config))  # type: ignore[arg-type]
    async with realtime:
        await bridge.start(realtime)

        async def events() -> None:
            async for event in realtime:
                await call.on_event(realtime, event)

        pump = asyncio.create_task(events())
        try:
            while await call.on_twilio(realtime, json.loads(await websocket.receive_text())):
                pass
        except WebSocketDisconnect:
            pass
        finally:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
    # After the Realtime session closed (its tool tasks cancelled): holdline's admissions
    # still finish, and whatever holdline has to say waits for the next channel.
    await bridge.aclose()


def create_app(holdline_url: str, realtime_url: str | None = None) -> FastAPI:
    """The agent's web app: Twilio's webhook, its stream endpoint and a health check."""
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/incoming-call")
    async def incoming_call(request: Request) -> PlainTextResponse:
        host = request.headers.get("host", "127.0.0.1")
        twiml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url="wss://{host}/v1/telephony/twilio"/></Connect></Response>'
        )
        return PlainTextResponse(twiml, media_type="text/xml")

    @app.websocket("/v1/telephony/twilio")
    async def twilio(websocket: WebSocket) -> None:
        await websocket.accept()
        async with HoldlineClient(holdline_url, api_key=os.environ.get("HOLDLINE_API_KEY")) as hl:
            await run_call(websocket, hl, realtime_url)

    return app


def main() -> None:
    """`python examples/openai_realtime_twilio.py [--port] [--holdline] [--realtime-url]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--holdline", default="http://127.0.0.1:8080", help="holdline's surface")
    parser.add_argument("--realtime-url", default=None,
                        help="a Realtime WebSocket URL other than OpenAI's")
    args = parser.parse_args()
    uvicorn.run(create_app(args.holdline, args.realtime_url), host="127.0.0.1", port=args.port,
                log_level="warning")


if __name__ == "__main__":
    main()
