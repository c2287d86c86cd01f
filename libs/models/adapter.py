"""What the two HTTP model adapters share once they have picked their wire format.

Each adapter says how a request body looks and how its stream folds (`_stream`,
`_failure_body`); this base holds the endpoint, the template acceptance and the streamed
failure explanation, which are the same for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from .functions import failure_prompt
from .interface import AdmissionNote, ModelError, OperationOutcome, TurnReply, TurnRequest
from .phrasing import acceptance_message
from .streaming import ModelEndpoint, RetryPolicy


class Streamed(Protocol):
    """The part of a folded stream the shared methods read."""

    text: str


class HttpModelAdapter(ABC):
    """Endpoint, acceptance and failure explanation for an adapter speaking HTTP to a vendor."""

    name: str

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout_s: float,
        retry: RetryPolicy | None,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self._endpoint = ModelEndpoint(
            base_url=self.base_url, api_key=api_key, timeout_s=timeout_s, retry=self.retry,
            vendor=self.name, transport=transport,
        )

    @abstractmethod
    async def _stream(self, body: dict[str, Any], deadline: float | None) -> Streamed:
        """Send `body` to this vendor and read its streamed answer."""

    @abstractmethod
    def _failure_body(self, system: str, user: str) -> dict[str, Any]:
        """The request body asking for a failure explanation, in this vendor's format."""

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._endpoint.aclose()

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """Template acceptance in the turn's language: deterministic, never a claim."""
        return acceptance_message(request, reply, notes)

    async def explain_failures(self, outcomes: Sequence[OperationOutcome], *, language: str) -> str:
        """A short closing with what worked, what failed and why, and an alternative."""
        system, user = failure_prompt(outcomes, language)
        text = (await self._stream(self._failure_body(system, user), None)).text.strip()
        if not text:
            raise ModelError(f"{self.name}: empty failure explanation")
        return text
