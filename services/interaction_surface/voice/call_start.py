"""Opening a call on any transport (`start_call`): who the caller is, trust, the session, and
the `Call` attached to this process.

A transport's loop decodes its carrier's start frame into a `CallStart` (the call's id as
the carrier gave it and the parameters its call-control document carried) and hands it here
with its `CallWire`. Everything is checked before anything is stored: a call ticket must be
ours, unused, and for this call and exactly these parameters; a session continued needs its
token; without an auth token only a loopback peer may open a session. A refusal raises
`StreamRefused` with the close code and the reason the transport counts.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Protocol

from nats.js.errors import KeyWrongLastSequenceError

from libs import metrics
from libs.domain import SessionState
from libs.events import ChannelConnected

from .call import Call
from .telephony import ID_PATTERN, Telephony
from .trust import TICKET, TicketRefused, check_ticket
from .wire import CallWire

log = logging.getLogger(__name__)


class StreamRefused(Exception):
    """A start that opens nothing: closed with `code`, counted under `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class TicketTrust(Protocol):
    """Whose call tickets a start must carry: Twilio's `TrustSettings`, or another
    carrier's (`carrier_settings.CarrierTrust`)."""

    @property
    def signed(self) -> bool:
        """Whether the carrier's requests are checked (otherwise local peers only)."""

    @property
    def ticket_key(self) -> bytes:
        """The key its webhook's tickets are made with."""


@dataclass(frozen=True, slots=True)
class CallStart:
    """What a transport's start frame says, decoded at its edge."""

    # The carrier's call id as received (a ticket is bound to it).
    call_id: str
    # The call-control document's parameters: `session_id` + `token`, or `user_id` +
    # `tenant_id`, and the call ticket when signed.
    params: dict[str, str]
    # A loopback peer with no proxy in between (may open sessions without an auth token).
    local: bool
    # The carrier's trust; None is Twilio's (`telephony.trust`).
    trust: TicketTrust | None = None


async def start_call(telephony: Telephony, wire: CallWire, start: CallStart) -> Call:
    """The call a start opens, attached to this process, or StreamRefused."""
    started = telephony.started
    if started is None:
        raise StreamRefused(4403, "not_ready")
    params = start.params
    call_sid = re.sub(r"[^A-Za-z0-9_-]", "", start.call_id)[:64] or telephony.ids.new("CA")
    trust: TicketTrust = start.trust or telephony.trust
    nonce: str | None = None
    if trust.signed and params.get(TICKET):
        # Present: it must be ours, for this call and exactly these parameters.
        try:
            nonce = check_ticket(
                trust.ticket_key, params[TICKET], start.call_id, params,
                now=telephony.clock.now().timestamp(),
            )
        except TicketRefused as exc:
            raise StreamRefused(4403, exc.reason) from None
    session: SessionState | None = None
    if params.get("session_id"):
        try:
            session = await telephony.find_session(params["session_id"], params.get("token"))
        except Exception:  # noqa: BLE001 - any lookup failure refuses the call the same way
            session = None
        if session is None or session.closed:
            raise StreamRefused(4404, "unknown_session")
    elif trust.signed and nonce is None:
        raise StreamRefused(4403, "ticket_missing")
    elif not trust.signed and not start.local:
        raise StreamRefused(4403, "not_local")
    if nonce is not None:
        await _claim_ticket(telephony, nonce)
    if session is None:
        user = params.get("user_id", "")
        tenant = params.get("tenant_id") or telephony.default_tenant
        if not ID_PATTERN.match(user) or not ID_PATTERN.match(tenant):
            raise StreamRefused(4404, "bad_caller")
        session = await telephony.open_session(user, tenant)
    call = Call(wire, session, call_sid, started.ports)
    await telephony.ownership.claim(call.connection_id)
    telephony.registry.attach(call)
    if telephony.on_attach is not None:
        telephony.on_attach(call)
    call.interaction(ChannelConnected(channel="voice", connection_id=call.connection_id))
    # An earlier call of the session dropped before its "did you say ...?" was answered.
    call.ask_again()
    metrics.TELEPHONY_CALLS.labels(outcome="started").inc()
    return call


async def end_call(telephony: Telephony, call: Call, reason: str) -> None:
    """The transport is gone: the call leaves this process and its ownership is released."""
    telephony.registry.detach(call)
    await call.hang_up(reason)
    await telephony.ownership.release(call.connection_id)


async def _claim_ticket(telephony: Telephony, nonce: str) -> None:
    """Use the ticket up, on every surface at once; StreamRefused when it was used before."""
    if telephony.started is None:
        raise StreamRefused(4403, "ticket_unverifiable")
    try:
        await telephony.started.tickets.create(f"t.{nonce}", b"used")
    except KeyWrongLastSequenceError:
        raise StreamRefused(4403, "ticket_replayed") from None
    except Exception as exc:  # noqa: BLE001 - a claim that cannot be made refuses the call
        log.warning("telephony: ticket claim failed: %r", exc)
        raise StreamRefused(4403, "ticket_unverifiable") from None
