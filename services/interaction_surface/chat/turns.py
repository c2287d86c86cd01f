"""Seed 003's `handle_user_turn`, made durable.

A turn, in order:
1. the session's turn is taken through its event log: `turn.received` is appended with the
   session subject's expected last sequence, and only when no other turn is open — two
   processes can never both open a turn, and a crashed turn expires after a timeout;
2. the same log answers a repeated `client_turn_id`: the view is current for the session
   whenever that guarded append succeeds, so an id the view has not seen was never received.
   A repeat gets the answer rebuilt from its first run's `turn.replied`, waits while that
   run is open, and runs again once that run's turn expired unreplied (`turn_plan.opening`);
3. the model sees the visible history plus, for this turn only, the live operations and
   the pending updates (closings that found no proactive window);
4. cancels, confirmations and undos go through admission; proposed calls are admitted;
5. what rides on the reply is decided only now: a pending update this turn's own requests
   made stale (a newer intent on its subject, an undo) is superseded or suppressed with its
   reason, the rest are attached (`delivery.attached` first, so nobody else says them);
6. the acceptance is worded from the attached set only (never claiming completion), the
   reply is written (`turn.replied`), then the attached updates are marked delivered.
It returns on acceptance; operations run elsewhere. A chat turn returns before step 6's
writes, which run behind the response while the session stays locked (the operations are
admitted, the log's open turn keeps other surfaces waiting, this surface's snapshot and
timeline wait for them: `recorded`); a voice turn writes them first, since its call writes
playback and truncation events after the reply. The decisions are in `turn_plan.py`.

Opening the turn on the log (with the client-turn repeats) is `turn_log.py`; the guarded
delivery appends of steps 5 and 6 are `turn_deliveries.py`; every write goes through the
surface's repositories (`core/writes.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from libs import metrics
from libs.admission import Admission, AdmissionOutcome, LoadView, TurnContext
from libs.clock import Clock, Ids
from libs.crash import pause_point
from libs.domain import SessionState
from libs.events import Envelope, InteractionEvent, TurnReplied
from libs.models.interface import (
    ConversationModel,
    ModelError,
    PendingUpdate,
    TurnReply,
    TurnRequest,
)
from libs.models.template import TemplateModel
from libs.tools import ToolRegistry

from ..core.answers import WriteBehind
from ..core.session_locks import SessionLocks
from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites
from ..settings import Settings
from . import turn_plan
from .conversation import fallback_acceptance, tool_spec
from .turn_deliveries import TurnDeliveries
from .turn_log import Repeat, TurnLog
from .turn_plan import SessionView

log = logging.getLogger(__name__)

# How long a chat turn's record waits for its answer to be sent (a client gone before the
# response was written never sets it).
_SENT_WAIT_S = 1.0


@dataclass(frozen=True, slots=True)
class _Answered:
    """A turn's answer, and the writes that record it (the reply, the closings delivered)."""

    answer: dict[str, Any]
    record: Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TurnInput:
    """A validated turn request."""

    session: SessionState
    text: str
    client_turn_id: str | None
    # Voice: attached updates are spoken (or not) by the call, so not marked delivered here.
    channel: Literal["chat", "voice"] = "chat"
    # Voice: looks at the proposed calls before admission; a question (str) means the
    # hearing is doubtful: nothing is admitted and the question is the reply.
    review: Callable[[Sequence[tuple[str, Mapping[str, Any]]]], str | None] | None = None
    # Chat: set once the answer has been sent, so its record is written after it (not
    # in the ticks the response still needs); waited for at most `_SENT_WAIT_S`.
    sent: asyncio.Event | None = None



class Turns:
    """Handles chat turns for every session."""

    def __init__(
        self,
        *,
        view: SurfaceView,
        writes: SurfaceWrites,
        admission: Admission,
        load_view: LoadView,
        model: ConversationModel,
        registry: ToolRegistry,
        settings: Settings,
        clock: Clock,
        ids: Ids,
    ) -> None:
        self._writes = writes
        self._clock = clock
        self._ids = ids
        self._view = view
        self._admission = admission
        self._load = load_view
        self._model = model
        self._settings = settings
        self._registry = registry
        self._tools = tuple(tool_spec(t) for t in registry.tools())
        # No conversation model configured (`libs.models.TemplateModel`): turns are refused.
        self.has_model = not isinstance(model, TemplateModel)
        # Same-process turns of a session queue here instead of racing on the log.
        self._locks = SessionLocks()
        # A chat turn's record, written behind its response, per session (one at a time:
        # the session's lock is held until it is written).
        self._behind = WriteBehind("turn reply")
        self._recording: dict[str, asyncio.Task[None]] = {}
        self._log = TurnLog(view, writes, settings, clock=clock, ids=ids)
        self._deliveries = TurnDeliveries(view, writes)

    # ------------------------------------------------------------------ entry point

    async def handle(self, request: TurnInput) -> dict[str, Any]:
        """Answer one turn (or, for a repeated client turn id, the first run's answer)."""
        started = time.perf_counter()
        session_id = request.session.session_id
        turn_id = self._ids.new("turn")
        await self._locks.acquire(session_id)
        behind = False
        try:
            answer = await self._turn(request, turn_id)
            if isinstance(answer, Repeat):
                return answer.answer
            if request.channel == "chat":
                # The lock passes to the write: the session's next turn starts after it.
                self._recording[session_id] = self._behind.start(
                    self._record_then_unlock(answer.record, session_id, request.sent),
                    name=f"turn-record-{turn_id}",
                )
                behind = True
            else:
                await answer.record()
        finally:
            if not behind:
                self._locks.release(session_id)
        metrics.ACCEPTANCE.observe(time.perf_counter() - started)
        return answer.answer

    async def recorded(self, session_id: str) -> None:
        """Wait until the session's last answered chat turn is in this surface's view, so a
        read after the answer sees its reply (read-your-writes for this process)."""
        task = self._recording.get(session_id)
        if task is not None:
            await asyncio.wait({task})

    async def flush(self) -> None:
        """Wait for the turn records still being written (at shutdown, before the bus closes)."""
        await self._behind.flush()

    async def _record_then_unlock(
        self,
        record: Callable[[], Awaitable[None]],
        session_id: str,
        sent: asyncio.Event | None,
    ) -> None:
        try:
            if sent is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(sent.wait(), _SENT_WAIT_S)
            await pause_point("surface.before_turn_recorded")
            await record()
        finally:
            task = asyncio.current_task()
            if self._recording.get(session_id) is task:
                del self._recording[session_id]
            self._locks.release(session_id)

    # ------------------------------------------------------------------ the turn

    async def _turn(self, request: TurnInput, turn_id: str) -> _Answered | Repeat:
        session_id = request.session.session_id
        received_at = await self._log.open(session_id, turn_id, request)
        if isinstance(received_at, Repeat):
            return received_at
        found = self._view.log(session_id)
        seen = SessionView(
            session=self._view.session(session_id) or request.session,
            context_from=found.context_from if found is not None else 0,
            operations=self._view.session_operations(session_id),
            deliveries=self._view.session_deliveries(session_id),
        )
        response_id = self._ids.new("resp")
        ctx = TurnContext(
            session_id=session_id,
            turn_id=turn_id,
            tenant_id=seen.session.tenant_id,
            user_id=seen.session.user_id,
            agent=seen.session.agent,
        )
        model_request = turn_plan.model_request(
            seen,
            text=request.text,
            turn_id=turn_id,
            tools=self._tools,
            label=self._registry.label,
            default_language=self._settings.language,
            now=self._clock.now(),
            deadline=time.monotonic() + self._settings.model_timeout_s,
        )
        reply = await self._respond(model_request)
        question = None
        if reply is not None and reply.calls and request.review is not None:
            question = request.review([(c.tool, c.arguments) for c in reply.calls])
        plan = turn_plan.plan_turn(model_request, reply, self._clock.now(), question=question)
        outcomes: list[AdmissionOutcome] = []
        if plan.reply is None:
            attached = await self._deliveries.attach(session_id, turn_id, plan.updates)
            text = turn_plan.reply_text(plan.apology or "", attached, None)
        else:
            with metrics.turn_phase("admission"):
                results = await self._act(ctx, plan.actions)
            outcomes = [outcome for _, outcome in results]
            with metrics.turn_phase("updates"):
                live, refused = turn_plan.stale_updates(
                    session_id,
                    plan.updates,
                    self._view.deliveries.get,
                    outcomes,
                    turn_plan.undone(results),
                )
                for delivery_id, verdict in refused:
                    await self._deliveries.refuse(session_id, turn_id, delivery_id, verdict)
                attached = await self._deliveries.attach(session_id, turn_id, live)
            final_request, worded = turn_plan.reworded_reply(model_request, plan.reply, attached)
            with metrics.turn_phase("acceptance_text"):
                text = await self._acceptance(final_request, worded, outcomes)
            text = turn_plan.reply_text(text, attached, worded)

        async def record() -> None:
            await self._reply(
                ctx,
                response_id=response_id,
                text=text,
                outcomes=outcomes,
                attached=attached,
                cause=received_at,
            )
            if request.channel == "chat":
                with metrics.turn_phase("delivered"):
                    await self._deliveries.delivered(session_id, attached, turn_id)

        answer = turn_plan.answer(
            turn_id=turn_id,
            text=text,
            response_id=response_id,
            operations=turn_plan.replied_operations(outcomes),
            attached_delivery_ids=[u.delivery_id for u in attached],
            channel=request.channel,
        )
        return _Answered(answer, record)

    async def _respond(self, request: TurnRequest) -> TurnReply | None:
        """The model's reply, or None when it failed or ran out of time."""
        try:
            with metrics.turn_phase("model"):
                return await asyncio.wait_for(
                    self._model.respond(request), self._settings.model_timeout_s
                )
        except (ModelError, TimeoutError) as exc:
            log.warning("model failed on turn %s: %r", request.turn_id, exc)
        except Exception:
            log.exception("model crashed on turn %s", request.turn_id)
        return None

    async def _act(
        self, ctx: TurnContext, actions: Sequence[turn_plan.Action]
    ) -> list[tuple[turn_plan.Action, AdmissionOutcome]]:
        """Put the planned actions through admission, in order, each with its outcomes."""
        results: list[tuple[turn_plan.Action, AdmissionOutcome]] = []
        for action in actions:
            match action:
                case turn_plan.Cancel(operation_id):
                    outcome = await self._admission.request_cancel(
                        ctx, operation_id, reason="user asked"
                    )
                    results.append((action, outcome))
                case turn_plan.Confirm(operation_id, accept):
                    outcome = await self._admission.confirm(ctx, operation_id, accept=accept)
                    results.append((action, outcome))
                case turn_plan.Compensate(operation_id):
                    results.append((action, await self._admission.compensate(ctx, operation_id)))
                case turn_plan.Admit(calls):
                    admitted = await self._admission.admit(ctx, list(calls))
                    results.extend((action, o) for o in admitted.outcomes)
        return results

    async def _acceptance(
        self, request: TurnRequest, reply: TurnReply, outcomes: Sequence[AdmissionOutcome]
    ) -> str:
        if not outcomes:
            return reply.text
        notes = [
            turn_plan.admission_note(
                o,
                self._load.get(o.operation_id) or self._view.operations.get(o.operation_id),
                request.session_id,
                self._registry.label,
            )
            for o in outcomes
        ]
        try:
            return await asyncio.wait_for(
                self._model.accept(request, reply, notes), self._settings.model_timeout_s
            )
        except Exception as exc:  # noqa: BLE001 - the acceptance falls back to a fixed template
            log.warning("model could not word the acceptance: %r", exc)
            return fallback_acceptance(notes, request.language)

    async def _reply(
        self,
        ctx: TurnContext,
        *,
        response_id: str,
        text: str,
        outcomes: Sequence[AdmissionOutcome],
        attached: Sequence[PendingUpdate],
        cause: str,
    ) -> None:
        env: Envelope[InteractionEvent] = Envelope(
            event_id=self._ids.new("ev"),
            occurred_at=self._clock.now(),
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            response_id=response_id,
            agent=ctx.agent,
            # The message carrying a batch's closing names its delivery.
            delivery_id=attached[0].delivery_id if attached else None,
            causation_id=cause,
            event=TurnReplied(
                text=text,
                operation_ids=tuple(o.operation_id for o in outcomes if o.operation_id),
                attached_delivery_ids=tuple(u.delivery_id for u in attached),
                operations=turn_plan.replied_operations(outcomes),
            ),
        )
        subject = self._writes.topology.session_subject(ctx.session_id)
        with metrics.turn_phase("replied_append"):
            # Waits until the view applied it (the repository's view source).
            await self._writes.interaction.record(subject, env)

