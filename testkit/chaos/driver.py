"""Many chat sessions over the surface's public API, remembering what the surface acknowledged.

Each session loop opens sessions one after another and asks for batches of accesses (some
with provider faults, some followed by a cancellation); a WebSocket observer per session
records every closing message the client was actually shown. Requests that fail while
processes die are counted, never retried blindly: only 2xx answers count as acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import connect

from testkit.surface import Chat

_WORDS = ("github", "jira", "slack", "figma", "notion", "sentry", "confluence", "vault")
_HTTP_TIMEOUT_S = 20.0
_OPEN_ATTEMPTS = 20


def carried(delivery_id: str | None, attached: tuple[str, ...] | list[str]) -> set[str]:
    """Deliveries one reply carries: the one it was written for, and those attached to it."""
    return ({delivery_id} if delivery_id else set()) | set(attached)


@dataclass
class Acked:
    """What the surface answered 2xx for, and what clients saw."""

    tokens: dict[str, str] = field(default_factory=dict)
    turns: dict[str, str] = field(default_factory=dict)  # turn_id -> session_id
    operations: dict[str, str] = field(default_factory=dict)  # operation_id -> session_id
    # Delivery ids whose message a client was shown on its WebSocket (live or on resume).
    seen: set[str] = field(default_factory=set)
    requests: Counter[str] = field(default_factory=Counter)
    provider_faults: Counter[str] = field(default_factory=Counter)


@dataclass
class Driver:
    """Session loops against one surface URL."""

    surface_url: str
    provider_url: str
    seed: int
    acked: Acked = field(default_factory=Acked)
    turns_per_session: int = 3
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _observers: list[asyncio.Task[None]] = field(default_factory=list)

    async def run(self, loops: int) -> None:
        """Run `loops` session loops until `stop` is set."""
        async with (
            httpx.AsyncClient(base_url=self.surface_url, timeout=_HTTP_TIMEOUT_S) as http,
            httpx.AsyncClient(base_url=self.provider_url, timeout=5.0) as provider,
        ):
            await asyncio.gather(
                *(
                    self._loop(http, provider, random.Random(f"{self.seed}:{i}"))
                    for i in range(loops)
                )
            )

    async def close_observers(self) -> None:
        """Stop every WebSocket observer."""
        for task in self._observers:
            task.cancel()
        await asyncio.gather(*self._observers, return_exceptions=True)

    async def nudge(self, session_id: str) -> None:
        """A plain turn, so a closing waiting for the next turn can ride on its reply."""
        async with httpx.AsyncClient(base_url=self.surface_url, timeout=_HTTP_TIMEOUT_S) as http:
            chat = Chat(http, session_id, self.acked.tokens[session_id], "")
            await self._say(chat, "and how is it going?")

    async def _loop(
        self, http: httpx.AsyncClient, provider: httpx.AsyncClient, rng: random.Random
    ) -> None:
        while not self.stop.is_set():
            chat = await self._open(http, rng)
            if chat is None:
                return
            self._observers.append(asyncio.create_task(self._observe(chat)))
            for _ in range(self.turns_per_session):
                if self.stop.is_set():
                    return
                await self._turn(chat, provider, rng)
                await self._pause(rng.uniform(0.5, 2.5))

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)

    async def _open(self, http: httpx.AsyncClient, rng: random.Random) -> Chat | None:
        body = {"user_id": f"u-{rng.getrandbits(32):08x}", "tenant_id": "acme"}
        for _ in range(_OPEN_ATTEMPTS):
            if self.stop.is_set():
                return None
            try:
                response = await http.post("/v1/sessions", json=body)
            except httpx.HTTPError:
                self.acked.requests["open_failed"] += 1
                await self._pause(1.0)
                continue
            if response.status_code == 201:
                data = response.json()
                self.acked.tokens[data["session_id"]] = data["token"]
                self.acked.requests["open_acked"] += 1
                return Chat(http, data["session_id"], data["token"], data["agent"])
            self.acked.requests[f"open_{response.status_code}"] += 1
            await self._pause(1.0)
        return None

    async def _turn(self, chat: Chat, provider: httpx.AsyncClient, rng: random.Random) -> None:
        count = rng.randint(1, 3)
        names = [f"{rng.choice(_WORDS)}-{rng.getrandbits(24):06x}" for _ in range(count)]
        for name in names:
            await self._provider_fault(provider, name, rng)
        listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
        await self._say(chat, f"give me access to {listed}")
        if len(names) > 1 and rng.random() < 0.25:
            await self._say(chat, f"cancel {names[-1]}")

    async def _provider_fault(
        self, provider: httpx.AsyncClient, name: str, rng: random.Random
    ) -> None:
        roll = rng.random()
        if roll < 0.15:
            body: dict[str, Any] = {"match": name, "status": 400, "times": 1}
            kind = "reject_400"
        elif roll < 0.35:
            body = {"match": name, "status": 503, "times": 2}
            kind = "retryable_503"
        elif roll < 0.5:
            body = {"match": name, "latency_ms": rng.randint(300, 1500), "times": 1}
            kind = "latency"
        else:
            return
        try:
            response = await provider.post("/admin/faults", json=body)
        except httpx.HTTPError:
            return
        if response.status_code == 201:
            self.acked.provider_faults[kind] += 1

    async def _say(self, chat: Chat, text: str) -> None:
        try:
            response = await chat.client.post(
                f"/v1/sessions/{chat.session_id}/turns", json={"text": text}, headers=chat.auth
            )
        except httpx.HTTPError:
            self.acked.requests["turn_failed"] += 1
            return
        if response.status_code != 200:
            self.acked.requests[f"turn_{response.status_code}"] += 1
            return
        body = response.json()
        self.acked.requests["turn_acked"] += 1
        self.acked.turns[body["turn_id"]] = chat.session_id
        for op in body.get("operations", []):
            self.acked.operations[op["operation_id"]] = chat.session_id

    async def _observe(self, chat: Chat) -> None:
        """Follow the session's stream, resuming by cursor after every disconnect."""
        cursor: str | None = None
        # Runs until cancelled by `close_observers`; each pass is one connection.
        while True:
            try:
                async with connect(chat.stream_url(cursor), open_timeout=10) as ws:
                    async for raw in ws:
                        frame = json.loads(raw)
                        cursor = frame.get("cursor", cursor)
                        self._record(frame)
            except Exception:  # any drop (surface killed, paused) means resume
                await asyncio.sleep(0.5)

    def _record(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "message":
            data = frame["event"]["data"]
            self.acked.seen.update(
                carried(frame["message"]["delivery_id"], data.get("attached_delivery_ids", []))
            )
        elif frame["type"] == "hello":
            for message in frame["snapshot"]["messages"]:
                if message["delivery_id"]:
                    self.acked.seen.add(message["delivery_id"])
