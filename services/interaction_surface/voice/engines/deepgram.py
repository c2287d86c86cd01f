"""Deepgram speech engines: streaming STT over a WebSocket, streaming TTS over HTTP.

`HOLDLINE_STT=deepgram` and/or `HOLDLINE_TTS=deepgram` select them; `DeepgramConfig`
lists the settings. Both speak the vendor's public wire protocol:

- STT (`deepgram_stt`): `GET /v1/listen` upgraded to a WebSocket with `Authorization:
  Token <key>` and the audio format in the query (`encoding=mulaw&sample_rate=8000&
  channels=1`); binary frames carry the audio, text frames the controls.
- TTS: `POST /v1/speak?model=...&encoding=mulaw&sample_rate=8000&container=none` with
  `{"text": ...}`; the body is raw μ-law audio, read as it arrives.

One WebSocket per utterance (the surface opens a recognizer when the VAD confirms speech),
so an idle call holds no vendor connection. Every wait is bounded: handshakes, reads,
retries and the final flush.

Here: the shared config and errors, and the TTS.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import urlencode

import httpx

from ..codec import RATE
from .base import SpeechError

log = logging.getLogger(__name__)

# Statuses worth another attempt: the vendor is busy or briefly broken, the request is fine.
_RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})


class VendorError(SpeechError):
    """The vendor refused or broke a request; `status` 0 means no HTTP answer at all."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"deepgram: {status or 'connection'}: {message}")
        self.status = status
        self.retryable = status == 0 or status in _RETRYABLE


@dataclass(frozen=True, slots=True)
class DeepgramConfig:
    """`DEEPGRAM_API_KEY` (required), `HOLDLINE_DEEPGRAM_URL` (https://api.deepgram.com),
    `HOLDLINE_DEEPGRAM_STT_MODEL` (nova-3), `HOLDLINE_DEEPGRAM_TTS_MODEL` (aura-2-thalia-en),
    `HOLDLINE_DEEPGRAM_ENDPOINTING_MS` (300: shorter than the VAD's endpointing window, so
    the vendor's final is usually in before the surface ends the turn),
    `HOLDLINE_DEEPGRAM_TIMEOUT_S` (5: connect/read bound), `HOLDLINE_DEEPGRAM_RETRIES` (2),
    `HOLDLINE_DEEPGRAM_FINALIZE_S` (2: how long the end of an utterance waits for the last
    results), `HOLDLINE_LANGUAGE` (en)."""

    # DEEPGRAM_API_KEY: required when an engine is `deepgram` (no key is a configuration error, not
    # a silent fallback).
    api_key: str
    # Deepgram's API base URL.
    base_url: str = "https://api.deepgram.com"
    # Deepgram's recognition model.
    stt_model: str = "nova-3"
    # Deepgram's synthesis voice.
    tts_model: str = "aura-2-thalia-en"
    # The language of recognition.
    language: str = "en"
    # Deepgram's endpointing: shorter than the VAD's, so the vendor's final is usually in before the
    # surface ends the turn.
    endpointing_ms: int = 300
    # Connect and read bound of one Deepgram request.
    timeout_s: float = 5.0
    # Retries of a failed Deepgram request.
    retries: int = 2
    backoff_s: float = 0.2
    # How long the end of an utterance waits for the last results.
    finalize_s: float = 2.0
    # Deepgram closes a stream that gets neither audio nor KeepAlive for 10 s.
    keepalive_s: float = 4.0
    # A recognizer nobody feeds or finishes (the call vanished) lets go of its socket.
    idle_close_s: float = 8.0

    @property
    def headers(self) -> dict[str, str]:
        """The vendor's auth header (`Token`, not `Bearer`)."""
        return {"Authorization": f"Token {self.api_key}"}

    def listen_url(self) -> str:
        """The streaming STT URL with the telephone audio format in the query."""
        scheme, _, rest = self.base_url.partition("://")
        ws = {"https": "wss", "http": "ws"}.get(scheme, scheme)
        query = {
            "model": self.stt_model,
            "language": self.language,
            "encoding": "mulaw",
            "sample_rate": str(RATE),
            "channels": "1",
            "interim_results": "true",
            "endpointing": str(self.endpointing_ms),
        }
        return f"{ws}://{rest}/v1/listen?{urlencode(query)}"

    def backoff(self, attempt: int) -> float:
        """Seconds before retry number `attempt` (1-based)."""
        return float(self.backoff_s * 2 ** (attempt - 1))


def vendor_message(body: str) -> str:
    """The `err_msg` of a vendor error body, else the body itself (shortened)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body[:200]
    if isinstance(data, dict):
        return str(data.get("err_msg") or data.get("message") or data)[:200]
    return body[:200]


async def _refused(response: httpx.Response) -> None:
    """Raise the vendor's refusal, if the response is one."""
    if response.status_code != httpx.codes.OK:
        body = (await response.aread()).decode(errors="replace")
        raise VendorError(response.status_code, vendor_message(body))


class DeepgramTts:
    """Text → μ-law 8 kHz, read from the HTTP response as the vendor streams it.

    A refusal before any audio (429, 5xx, no connection) is retried; once audio has
    flowed, a failure is an error: the start of the sentence is already on the call.
    Cancelling the iteration closes the response, so the vendor stops sending.
    """

    def __init__(self, config: DeepgramConfig) -> None:
        self.config = config
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                base_url=self.config.base_url,
                headers=self.config.headers,
                timeout=httpx.Timeout(self.config.timeout_s),
            )
        return self._http

    async def aclose(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        """μ-law chunks of `text` in order, each as soon as it arrives."""
        params = {
            "model": self.config.tts_model,
            "encoding": "mulaw",
            "sample_rate": str(RATE),
            "container": "none",
        }
        attempt = 0
        while True:
            got_audio = False
            try:
                async with self._client().stream(
                    "POST", "/v1/speak", params=params, json={"text": text}
                ) as response:
                    await _refused(response)
                    async for chunk in response.aiter_bytes():
                        if chunk:
                            got_audio = True
                            yield chunk
            except httpx.TransportError as exc:
                failure = VendorError(0, repr(exc))
            except VendorError as exc:
                failure = exc
            else:
                return
            if got_audio or not failure.retryable or attempt >= self.config.retries:
                raise failure
            attempt += 1
            log.warning("deepgram tts: %s; retry %d", failure, attempt)
            await asyncio.sleep(self.config.backoff(attempt))
