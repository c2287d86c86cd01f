"""What the runtime asks of a model. Kept to the calls it really makes."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """The terminal result of one operation, as a summary needs it."""

    operation_id: str
    tool: str
    # What the operation was about, in the user's words where possible ("alpha", "R on D").
    label: str
    status: str
    detail: str = ""
    # The tool's own sentence, when it declares one: its `closing` for a committed operation,
    # its `failure` for one that failed or was refused.
    line: str = ""


class SummaryModel(Protocol):
    """A model that turns a batch's outcomes into words for the user."""

    name: str

    async def explain_failures(self, outcomes: Sequence[OperationOutcome], *, language: str) -> str:
        """One short message: what worked, what failed and why, and a concrete alternative."""
        ...


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as offered to the model (from its declaration)."""

    name: str
    description: str
    # JSON Schema of the arguments (the declaration's msgspec schema).
    parameters: dict[str, Any]
    cancellable: bool = False


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A message of the visible history."""

    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True, slots=True)
class LiveOperation:
    """An operation the model may talk about this turn (never stored as a message)."""

    operation_id: str
    tool: str
    status: str
    label: str
    arguments: dict[str, Any] = field(default_factory=dict)
    prompt: str | None = None


@dataclass(frozen=True, slots=True)
class PendingUpdate:
    """A result not yet communicated: ephemeral context for this turn only."""

    delivery_id: str
    text: str


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """Everything a model sees for one turn."""

    session_id: str
    turn_id: str
    agent: str
    language: str
    user_text: str
    history: Sequence[ChatMessage]
    tools: Sequence[ToolSpec]
    live_operations: Sequence[LiveOperation] = ()
    pending_updates: Sequence[PendingUpdate] = ()
    # The user's local date (YYYY-MM-DD) for "today", "tomorrow", "el viernes". Models never
    # read the clock: without it, a relative date makes the model ask for the date instead.
    today: str | None = None
    # `time.monotonic()` by which the turn needs the answer: a model that retries gives up
    # before it rather than after (None: the model's own timeout alone).
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class ProposedCall:
    """A tool call the model proposes; the application decides whether to admit it."""

    tool: str
    arguments: dict[str, Any]
    call_id: str


def call_id(turn_id: str, index: int) -> str:
    """A stable id for the index-th call proposed in a turn (when the model gives none)."""
    digest = hashlib.sha256(f"{turn_id}:{index}".encode()).hexdigest()
    return f"call_{digest[:24]}"


@dataclass(frozen=True, slots=True)
class TurnReply:
    """What the model answered: words, proposed calls and explicit operation requests.

    `text` is what the model says besides its requests: the mention of pending updates
    (always first) and any answer. When the reply has no requests it is the whole answer;
    when it has some, show `ConversationModel.accept(...)`, which starts with `text`.
    """

    text: str
    calls: tuple[ProposedCall, ...] = ()
    # Operation ids the user explicitly asked to cancel ("don't do the transfer").
    cancels: tuple[str, ...] = ()
    # (operation id, yes/no) answers to pending confirmations.
    confirmations: tuple[tuple[str, bool], ...] = ()
    # Operation ids the user asked to undo (runs the declared compensating tool).
    compensations: tuple[str, ...] = ()
    # Pending update deliveries the reply actually mentions (they are then attached).
    attached: tuple[str, ...] = ()
    # Why each tool call the model emitted was dropped (bad JSON, unknown function, ...).
    dropped: tuple[str, ...] = ()

    @property
    def has_requests(self) -> bool:
        """Whether the application has anything to admit, cancel, confirm or undo."""
        return bool(self.calls or self.cancels or self.confirmations or self.compensations)


NoteKind = Literal["call", "cancel", "confirmation", "compensation"]


@dataclass(frozen=True, slots=True)
class AdmissionNote:
    """What admission answered for one request of the reply, for the acceptance sentence."""

    operation_id: str
    tool: str
    # The lowercase operation status admission reported (admitted, rejected, ...).
    status: str
    label: str
    # Admission's reason code (over_limit, not_cancellable, ...) or a short explanation.
    reason: str | None = None
    prompt: str | None = None
    # Which request of the reply it answers: a proposed call, a cancel, a yes/no, an undo.
    kind: NoteKind = "call"
    # The call repeated an intent already admitted: the note is about that operation.
    existing: bool = False


class ModelError(Exception):
    """The model failed or timed out; the turn must still answer honestly."""


class ConversationModel(SummaryModel, Protocol):
    """A model that takes turns: proposes calls, then phrases an acceptance that claims nothing."""

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Answer one turn. Raises ModelError when it cannot."""
        ...

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """The message to show: `reply.text`, then what was started, refused or needs a yes.

        Never claims completion: results arrive later, through deliveries.
        """
        ...
