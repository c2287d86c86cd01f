"""Deepgram streaming STT: `GET /v1/listen` upgraded to a WebSocket, one per utterance.

Binary frames carry the μ-law audio, text frames the `KeepAlive` / `CloseStream`
controls; the vendor answers `Results` (`is_final`, `speech_final`,
`channel.alternatives[0].transcript`) and a `Metadata` summary before it closes. A dropped
stream reconnects and replays the audio after the last final result; every wait is
bounded. The config and the errors are `deepgram`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ..codec import RATE, pcm16_to_ulaw
from ..floor import Word
from .deepgram import DeepgramConfig, VendorError, vendor_message

log = logging.getLogger(__name__)

# A reconnect replays unfinalised audio in pieces this size (400 ms of μ-law).
_REPLAY_BYTES = 3200
_LIVE: set[asyncio.Task[None]] = set()


@dataclass(frozen=True, slots=True)
class Transcript:
    """One thing the recognizer learned: an `interim` guess, a `final` segment, a
    `reconnected` stream (audio after the last final is sent again) or an `error`."""

    kind: Literal["interim", "final", "reconnected", "error"]
    text: str = ""
    speech_final: bool = False
    # Seconds from the start of the utterance (finals and interims).
    start_s: float = 0.0
    end_s: float = 0.0


class _Dropped(Exception):
    """The stream ended without our CloseStream: reconnect."""


class DeepgramStt:
    """Streaming recognition, one vendor WebSocket per utterance."""

    def __init__(self, config: DeepgramConfig) -> None:
        self.config = config

    def session(self) -> DeepgramRecognizer:
        """A recognizer streaming to the vendor from now on (needs a running loop)."""
        return DeepgramRecognizer(self.config)


class DeepgramRecognizer:
    """Audio in as it arrives; interim and final transcripts out as the vendor sends them.

    `feed` never blocks (audio is queued for the socket); `final()` ends the utterance and
    waits, bounded, for the last results; `finish()` is the same without waiting.
    """

    def __init__(self, config: DeepgramConfig) -> None:
        self._config = config
        self._audio = bytearray()  # the whole utterance, μ-law: a reconnect replays from it
        self._finals: list[str] = []
        self._final_words: list[Word] = []
        self._interim = ""
        self._final_end = 0  # bytes of audio covered by final results
        self._closing = False
        # Monotonic, not the surface's Clock: it only measures how long the stream sat idle.
        self._fed_at = time.monotonic()
        self._wake = asyncio.Event()
        # Unbounded, yet bounded by the utterance: idle or finished, the stream ends.
        self._events: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self.connections = 0
        self.error: str | None = None
        self._task = asyncio.get_running_loop().create_task(self._run())
        _LIVE.add(self._task)
        self._task.add_done_callback(_LIVE.discard)

    # ------------------------------------------------------------------ Recognizer

    def feed(self, pcm16_8k: bytes) -> None:
        """More audio (PCM16 8 kHz); sent as μ-law, the telephone's own encoding."""
        if self._closing or self._task.done():
            return
        self._audio += pcm16_to_ulaw(pcm16_8k)
        self._fed_at = time.monotonic()
        self._wake.set()

    def finish(self) -> str:
        """End the utterance now: what the vendor finalised so far, plus its latest guess."""
        self._closing = True
        self._wake.set()
        return self.text

    async def final(self) -> str:
        """End the utterance and wait (at most `finalize_s`) for the vendor's last results."""
        self._closing = True
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self._config.finalize_s)
        except TimeoutError:
            self._fail("no final results in time")
            self._task.cancel()
        except Exception as exc:
            # A bug here must not take the call down: the turn just gets what is known.
            log.exception("deepgram stt: the stream failed")
            self._fail(repr(exc))
        return self.text

    def words(self) -> list[Word]:
        """The finalised words with the vendor's confidence in each."""
        return list(self._final_words)

    @property
    def text(self) -> str:
        """Final segments joined, then the unfinalised guess if any."""
        return " ".join(t for t in (*self._finals, self._interim) if t)

    async def results(self) -> AsyncIterator[Transcript]:
        """Everything the recognizer learns, in order, until the stream is over."""
        while (event := await self._events.get()) is not None:
            yield event

    async def aclose(self) -> None:
        """Drop the stream at once (the call ended)."""
        self._closing = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    # ------------------------------------------------------------------ the stream

    def _emit(self, event: Transcript) -> None:
        self._events.put_nowait(event)

    def _fail(self, message: str) -> None:
        # A guess from a broken stream is not a transcript: only finals survive.
        self._interim = ""
        if self.error is None:
            self.error = message
            log.warning("deepgram stt: %s", message)
            self._emit(Transcript("error", text=message))

    async def _run(self) -> None:
        attempt = 0
        try:
            while True:
                try:
                    await self._connection()
                except InvalidStatus as exc:
                    failure = _status_error(exc)
                except _Dropped as exc:
                    failure = VendorError(0, str(exc) or "stream dropped")
                except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                    failure = VendorError(0, repr(exc))
                else:
                    return
                if not failure.retryable or attempt >= self._config.retries:
                    self._fail(str(failure))
                    return
                attempt += 1
                await asyncio.sleep(self._config.backoff(attempt))
        except (ValueError, KeyError, TypeError) as exc:
            # A message we cannot read: the stream is useless, say so instead of hanging.
            self._fail(f"unreadable vendor message: {exc!r}")
        finally:
            self._events.put_nowait(None)

    async def _connection(self) -> None:
        start = self._final_end
        async with connect(
            self._config.listen_url(),
            additional_headers=self._config.headers,
            open_timeout=self._config.timeout_s,
            close_timeout=self._config.timeout_s,
        ) as ws:
            self.connections += 1
            self._interim = ""
            if self.connections > 1:
                self._emit(Transcript("reconnected", start_s=start / RATE))
            sender = asyncio.create_task(self._send(ws, start))
            try:
                await self._receive(ws, start)
            finally:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                    await sender
            # Only a normal close after our CloseStream means every result is in.
            said_bye = (
                sender.done() and not sender.cancelled() and sender.exception() is None
                and sender.result()
            )
            if not said_bye or ws.close_code != 1000:
                raise _Dropped(f"closed by the vendor ({ws.close_code} {ws.close_reason})")

    async def _send(self, ws: ClientConnection, position: int) -> bool:
        config = self._config
        while True:
            self._wake.clear()
            if position < len(self._audio):
                end = min(len(self._audio), position + _REPLAY_BYTES)
                await ws.send(bytes(self._audio[position:end]))
                position = end
                continue
            if self._closing or time.monotonic() - self._fed_at > config.idle_close_s:
                self._closing = True
                # The vendor flushes what it has, sends Metadata, then closes.
                await ws.send(json.dumps({"type": "CloseStream"}))
                return True
            try:
                await asyncio.wait_for(self._wake.wait(), config.keepalive_s)
            except TimeoutError:
                await ws.send(json.dumps({"type": "KeepAlive"}))

    async def _receive(self, ws: ClientConnection, start: int) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                if isinstance(raw, str):
                    self._on_message(json.loads(raw), start)

    def _on_message(self, message: dict[str, Any], start: int) -> None:
        if message.get("type") != "Results":
            return  # Metadata, SpeechStarted, UtteranceEnd: nothing the surface needs
        alternatives = message.get("channel", {}).get("alternatives") or [{}]
        text = str(alternatives[0].get("transcript", "")).strip()
        begin = start / RATE + float(message.get("start", 0.0))
        end = begin + float(message.get("duration", 0.0))
        if message.get("is_final"):
            if text:
                self._finals.append(text)
                self._final_words += _words(alternatives[0], text)
            self._interim = ""
            self._final_end = max(self._final_end, int(end * RATE))
            self._emit(Transcript(
                "final", text=text, speech_final=bool(message.get("speech_final")),
                start_s=begin, end_s=end,
            ))
        elif text:
            self._interim = text
            self._emit(Transcript("interim", text=text, start_s=begin, end_s=end))


def _words(alternative: dict[str, Any], text: str) -> list[Word]:
    """Per-word confidences of a result, else the alternative's own for every word."""
    listed = alternative.get("words")
    if isinstance(listed, list) and listed:
        return [
            Word(str(w.get("word", "")), float(w.get("confidence", 0.0)))
            for w in listed
            if isinstance(w, dict) and w.get("word")
        ]
    overall = float(alternative.get("confidence", 0.0) or 0.0)
    return [Word(w, overall) for w in text.split()]


def _status_error(exc: InvalidStatus) -> VendorError:
    response = exc.response
    body = response.body.decode(errors="replace") if response.body else ""
    return VendorError(response.status_code, vendor_message(body) or response.reason_phrase)
