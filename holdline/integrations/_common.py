"""What the three adapters share: tool definitions read once, a model's call admitted,
facts phrased for a model, and the words of a cut utterance that were heard. Framework-free,
client-only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from holdline.client import Fact, HoldlineError, PendingDelivery, SessionClient, ToolCall

log = logging.getLogger("holdline.integrations")

# "text": say holdline's own closing; "model": let the framework's model phrase the facts.
SpeakMode = Literal["text", "model"]


@dataclass(frozen=True)
class ToolSpec:
    """One tool as holdline declares it: what every framework's registration needs."""

    name: str
    description: str
    parameters: dict[str, Any]


def tool_specs(definitions: Sequence[dict[str, Any]]) -> list[ToolSpec]:
    """`GET .../tools?format=openai` → specs; both OpenAI shapes (chat `{"function": …}`
    and responses' flat one) are read, so the server may emit either."""
    specs: list[ToolSpec] = []
    for definition in definitions:
        body = definition.get("function", definition)
        parameters = body.get("parameters") or {"type": "object", "properties": {}}
        specs.append(ToolSpec(str(body["name"]), str(body.get("description", "")), parameters))
    return specs


async def agent_tools(session: SessionClient) -> list[ToolSpec]:
    """The tools the session's active agent may call, as specs to register with a framework."""
    return tool_specs(await session.tools(format="openai"))


async def call_tool(session: SessionClient, call: ToolCall, user_text: str | None = None) -> str:
    """One call the framework's model made, admitted by holdline: the call's output, or why
    nothing started (returned, not raised, so the model hears it)."""
    try:
        response = await session.tool_calls([call], user_text=user_text)
    except HoldlineError as error:
        return refused_output(error)
    return response.results[0].output


def facts_prompt(text: str, facts: Sequence[Fact]) -> str:
    """Instructions for the framework's own model to phrase a closing over the facts."""
    lines = [f"- {fact.tool} ({fact.status}): {fact.summary}" for fact in facts]
    return (
        "Tell the user, briefly and only once, how the work they asked for ended. "
        "Say nothing that these facts do not state.\n"
        + "\n".join(lines)
        + f"\nA correct wording is: {text}"
    )


def pending_context(deliveries: Sequence[PendingDelivery], context: str) -> str:
    """The text to fold into the next model call (holdline's own block when it gave one)."""
    if context:
        return context
    return "Updates the user has not heard yet:\n" + "\n".join(f"- {d.text}" for d in deliveries)


def refused_output(error: HoldlineError) -> str:
    """The tool result when holdline refused the call itself: honest, nothing started."""
    return f"The request was not accepted and nothing was started: {error.detail or error.title}"


def heard_prefix(text: str, played_s: float, words_per_second: float) -> str:
    """The words of `text` that fit in `played_s` of speech: what a caller heard before a
    cut, when the framework reports only how long the audio played."""
    words = text.split()
    count = max(0, min(len(words), int(played_s * words_per_second)))
    return " ".join(words[:count])


class Outbox:
    """Runs queued coroutines one at a time in the order they were queued, off the caller's
    task: a framework's frame loop or event callback never waits on holdline's network, and
    holdline still sees the facts in the order they happened."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: asyncio.Queue[Callable[[], Awaitable[Any]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin running (needs a running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self._name)

    def put(self, job: Callable[[], Awaitable[Any]]) -> None:
        """Queue one job."""
        self._queue.put_nowait(job)

    async def drain(self, timeout_s: float = 5.0) -> None:
        """Wait (bounded) until every queued job ran."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout_s)

    async def stop(self) -> None:
        """Stop running; what is still queued is dropped (holdline re-decides unacked work)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await job()
            except Exception:  # one lost report is corrected by the next; keep the box alive
                log.warning("%s: a report to holdline failed", self._name, exc_info=True)
            finally:
                self._queue.task_done()


class SignalPump(Outbox):
    """The framework's speaking facts → `POST .../signals`, repeats dropped, in order."""

    def __init__(self, session: SessionClient) -> None:
        super().__init__("holdline-signals")
        self._session = session
        self._last: dict[str, bool] = {}

    def send(self, **fact: bool) -> None:
        """Queue a changed fact (`user_speaking=` and/or `agent_speaking=`)."""
        changed = {k: v for k, v in fact.items() if self._last.get(k) != v}
        if changed:
            self._last.update(changed)
            self.put(lambda: self._session.signal(**changed))

