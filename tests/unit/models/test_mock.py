"""The deterministic mock model: English and Spanish phrasings → calls and explicit requests."""

from __future__ import annotations

import re
from typing import Any

import pytest

from demo.models import MockModel
from libs.models import get_model
from libs.models.interface import (
    AdmissionNote,
    ChatMessage,
    LiveOperation,
    OperationOutcome,
    PendingUpdate,
    ToolSpec,
    TurnReply,
    call_id,
)
from testkit.models.turns import BOOKING, GITHUB, JIRA, LIVE, TRANSFER, calls_of, turn

# Words that would claim an operation finished.
CLAIMS = re.compile(
    r"\b(done|completed?|finished|booked|granted|sent|succeeded|hecho|hecha|listo|lista|"
    r"terminad[oa]|completad[oa]|reservad[oa]|concedid[oa]|enviad[oa])\b",
    re.IGNORECASE,
)

BOOK = "book_table"
ACCESS = "provision_access"
TRANSFER_TOOL = "transfer_money"
AVAILABILITY = "check_availability"


def booking(restaurant: str, day: str, time: str, size: int = 2) -> dict[str, Any]:
    return {"restaurant": restaurant, "date": day, "time": time, "party_size": size}


def transfer(to: str, cents: int, currency: str = "EUR", source: str = "main") -> dict[str, Any]:
    return {
        "to_account": to,
        "amount_cents": cents,
        "currency": currency,
        "from_account": source,
    }


@pytest.fixture
def model() -> MockModel:
    return MockModel()


NEW_REQUESTS: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = [
    # batch accesses
    (
        "give me access to github, jira and confluence",
        [(ACCESS, {"accesses": ["github", "jira", "confluence"]})],
    ),
    (
        "dame acceso a github, jira y confluence",
        [(ACCESS, {"accesses": ["github", "jira", "confluence"]})],
    ),
    (
        "I need access to GitHub, Google Drive & Notion please",
        [(ACCESS, {"accesses": ["github", "google-drive", "notion"]})],
    ),
    ("give me github and jira access", [(ACCESS, {"accesses": ["github", "jira"]})]),
    ("necesito acceso a Slack", [(ACCESS, {"accesses": ["slack"]})]),
    # A repeat is the user's words: admission, not the model, maps it to one intent.
    ("give me access to notion and notion", [(ACCESS, {"accesses": ["notion", "notion"]})]),
    # bookings
    (
        "book a table for two at Casa Pepe tomorrow at 21:00",
        [(BOOK, booking("casa-pepe", "2025-06-12", "21:00"))],
    ),
    ("reserva para dos a las 21:00", [(BOOK, booking("casa-pepe", "2025-06-11", "21:00"))]),
    (
        "reserva para cuatro en Lhardy mañana a las 9 y media de la noche",
        [(BOOK, booking("lhardy", "2025-06-12", "21:30", 4))],
    ),
    (
        "Book Lhardy for 4 on 2025-07-01 at 2pm",
        [(BOOK, booking("lhardy", "2025-07-01", "14:00", 4))],
    ),
    # availability
    (
        "is Casa Pepe free on Friday?",
        [(AVAILABILITY, {"restaurant": "casa-pepe", "date": "2025-06-13"})],
    ),
    (
        "¿está libre Casa Pepe el viernes?",
        [(AVAILABILITY, {"restaurant": "casa-pepe", "date": "2025-06-13"})],
    ),
    (
        "¿tiene Lhardy mesa el sábado?",
        [(AVAILABILITY, {"restaurant": "lhardy", "date": "2025-06-14"})],
    ),
    # transfers
    ("send 50 euros to bob-main", [(TRANSFER_TOOL, transfer("bob-main", 5000))]),
    ("transfiere 50 euros a bob-main", [(TRANSFER_TOOL, transfer("bob-main", 5000))]),
    ("envía 12,50 € a alice", [(TRANSFER_TOOL, transfer("alice", 1250))]),
    (
        "transfer $20 to carol from savings",
        [(TRANSFER_TOOL, transfer("carol", 2000, "USD", "savings"))],
    ),
    # two requests in one turn keep the user's order
    (
        "book a table at Casa Pepe tomorrow at 21:00 and give me access to github",
        [
            (BOOK, booking("casa-pepe", "2025-06-12", "21:00")),
            (ACCESS, {"accesses": ["github"]}),
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), NEW_REQUESTS)
async def test_requests_become_calls(
    model: MockModel, text: str, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    reply = await model.respond(turn(text))
    assert calls_of(reply) == expected
    assert reply.cancels == ()
    assert reply.confirmations == ()
    assert reply.compensations == ()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mejor a las 21:30", booking("casa-pepe", "2025-06-12", "21:30")),
        ("make it 21:30", booking("casa-pepe", "2025-06-12", "21:30")),
        ("no, mejor a las 21:30", booking("casa-pepe", "2025-06-12", "21:30")),
        ("actually, make it four people", booking("casa-pepe", "2025-06-12", "21:00", 4)),
        ("mejor el viernes", booking("casa-pepe", "2025-06-13", "21:00")),
    ],
)
async def test_a_change_is_a_new_booking_of_the_same_subject(
    model: MockModel, text: str, expected: dict[str, Any]
) -> None:
    reply = await model.respond(turn(text, live=LIVE))
    assert calls_of(reply) == [(BOOK, expected)]
    # A change supersedes through admission: never a cancel of the old booking here.
    assert reply.cancels == ()
    assert reply.confirmations == ()


async def test_a_change_finds_the_booking_in_the_history(model: MockModel) -> None:
    history = [
        ChatMessage("user", "reserva para dos en Casa Pepe mañana a las 21:00"),
        ChatMessage("assistant", "Me pongo con ello: casa-pepe 2025-06-12 21:00."),
    ]
    reply = await model.respond(turn("mejor a las 21:30", history=history))
    assert calls_of(reply) == [(BOOK, booking("casa-pepe", "2025-06-12", "21:30"))]


async def test_a_change_without_any_booking_asks(model: MockModel) -> None:
    reply = await model.respond(turn("make it 21:30"))
    assert reply.calls == ()
    assert "which booking" in reply.text.lower()


async def test_booking_without_restaurant_uses_the_one_in_context(model: MockModel) -> None:
    history = [ChatMessage("user", "is Lhardy free tomorrow?")]
    reply = await model.respond(turn("reserva para dos a las 21:00", history=history))
    assert calls_of(reply) == [(BOOK, booking("lhardy", "2025-06-12", "21:00"))]


async def test_the_date_in_context_belongs_to_its_restaurant(model: MockModel) -> None:
    same = await model.respond(turn("reserva para cuatro a las 22:00", live=(BOOKING,)))
    other = await model.respond(turn("book Lhardy at 14:00", live=(BOOKING,)))
    assert calls_of(same) == [(BOOK, booking("casa-pepe", "2025-06-12", "22:00", 4))]
    assert calls_of(other) == [(BOOK, booking("lhardy", "2025-06-11", "14:00"))]


async def test_relative_dates_need_today_from_the_request(model: MockModel) -> None:
    reply = await model.respond(turn("book a table at Casa Pepe tomorrow at 21:00", today=None))
    assert reply.calls == ()
    assert "date" in reply.text.lower()
    explicit = await model.respond(turn("book Casa Pepe on 2025-06-20 at 21:00", today=None))
    assert calls_of(explicit) == [(BOOK, booking("casa-pepe", "2025-06-20", "21:00"))]


async def test_missing_details_are_asked_for(model: MockModel) -> None:
    no_time = await model.respond(turn("book a table at Casa Pepe tomorrow"))
    no_recipient = await model.respond(turn("transfiere 50 euros"))
    no_names = await model.respond(turn("give me access to"))
    for reply in (no_time, no_recipient, no_names):
        assert reply.calls == ()
        assert reply.text.endswith("?")


async def test_a_tool_the_agent_does_not_offer_is_not_proposed(model: MockModel) -> None:
    reply = await model.respond(turn("send 50 euros to bob-main", tools=()))
    assert reply.calls == ()
    assert "transfer_money" in reply.text


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("yes", True),
        ("Yes, please.", True),
        ("sí", True),
        ("Sí, adelante", True),
        ("confirm", True),
        ("confirm the transfer", True),
        ("confirmo", True),
        ("no", False),
        ("No, gracias", False),
        ("nope", False),
    ],
)
async def test_confirmations_answer_what_awaits_a_yes(
    model: MockModel, text: str, answer: bool
) -> None:
    reply = await model.respond(turn(text, live=LIVE))
    assert reply.confirmations == ((TRANSFER.operation_id, answer),)
    assert reply.calls == ()
    assert reply.cancels == ()


async def test_yes_with_nothing_awaiting_says_so(model: MockModel) -> None:
    reply = await model.respond(turn("yes", live=(JIRA,)))
    assert reply.confirmations == ()
    assert "nothing waiting" in reply.text


@pytest.mark.parametrize(
    ("text", "cancelled"),
    [
        ("don't do the transfer", TRANSFER.operation_id),
        ("Do not send the 50 euros transfer", TRANSFER.operation_id),
        ("cancel the booking", BOOKING.operation_id),
        ("cancel the Casa Pepe reservation", BOOKING.operation_id),
        ("no hagas la transferencia", TRANSFER.operation_id),
        ("cancela la reserva", BOOKING.operation_id),
        ("wait, don't do the transfer", TRANSFER.operation_id),
        ("stop the jira access", JIRA.operation_id),
    ],
)
async def test_explicit_cancellation_names_the_operation(
    model: MockModel, text: str, cancelled: str
) -> None:
    reply = await model.respond(turn(text, live=LIVE))
    assert reply.cancels == (cancelled,)
    assert reply.calls == ()
    assert reply.confirmations == ()
    assert reply.compensations == ()


@pytest.mark.parametrize(
    "text", ["wait", "Wait!", "hold on", "one second", "espera", "Espera un momento", "un momento"]
)
async def test_wait_cancels_nothing(model: MockModel, text: str) -> None:
    reply = await model.respond(turn(text, live=LIVE))
    assert reply.cancels == ()
    assert reply.compensations == ()
    assert reply.confirmations == ()
    assert reply.calls == ()
    assert re.search(r"nothing is cancelled|no cancelo nada", reply.text, re.IGNORECASE)


async def test_cancel_without_a_target_asks_which(model: MockModel) -> None:
    reply = await model.respond(turn("cancel it", live=LIVE))
    assert reply.cancels == ()
    assert "which one" in reply.text.lower()
    only = await model.respond(turn("cancel it", live=(BOOKING,)))
    assert only.cancels == (BOOKING.operation_id,)


async def test_cancel_with_nothing_live_cancels_nothing(model: MockModel) -> None:
    reply = await model.respond(turn("don't do the transfer"))
    assert reply.cancels == ()
    assert "nothing" in reply.text.lower()


@pytest.mark.parametrize(
    ("text", "cancels", "compensations"),
    [
        ("undo the github access", (), (GITHUB.operation_id,)),
        ("revoke github", (), (GITHUB.operation_id,)),
        ("quita el acceso a github", (), (GITHUB.operation_id,)),
        ("deshaz el acceso a github", (), (GITHUB.operation_id,)),
        # Not committed yet: undoing it is cancelling it.
        ("undo the jira access", (JIRA.operation_id,), ()),
    ],
)
async def test_undo_compensates_what_went_through(
    model: MockModel, text: str, cancels: tuple[str, ...], compensations: tuple[str, ...]
) -> None:
    reply = await model.respond(turn(text, live=LIVE))
    assert reply.cancels == cancels
    assert reply.compensations == compensations


async def test_cancelling_a_committed_booking_compensates_it(model: MockModel) -> None:
    done = LiveOperation(
        BOOKING.operation_id, BOOKING.tool, "committed", BOOKING.label, BOOKING.arguments
    )
    reply = await model.respond(turn("cancel the booking", live=(done,)))
    assert reply.cancels == ()
    assert reply.compensations == (done.operation_id,)


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("how is it going?", "en"),
        ("any news?", "en"),
        ("is it done?", "en"),
        ("¿cómo va?", "es"),
        ("¿qué tal va la reserva?", "es"),
        ("¿ya está?", "es"),
    ],
)
async def test_status_answers_from_live_operations_without_claims(
    model: MockModel, text: str, language: str
) -> None:
    live = (JIRA, BOOKING, TRANSFER)
    reply = await model.respond(turn(text, live=live))
    assert not reply.has_requests
    assert not CLAIMS.search(reply.text), reply.text
    if language == "es":
        assert "en curso" in reply.text
    else:
        assert "in progress" in reply.text
        assert "waiting for your confirmation" in reply.text
    assert "jira" in reply.text or "casa-pepe" in reply.text


async def test_status_with_nothing_live(model: MockModel) -> None:
    reply = await model.respond(turn("¿cómo va?"))
    assert reply.text == "Ahora mismo no hay nada en marcha."


async def test_status_tells_committed_only_when_it_is(model: MockModel) -> None:
    reply = await model.respond(turn("how is it going?", live=(GITHUB, JIRA)))
    assert "github: confirmed by the provider" in reply.text
    assert "jira: in progress" in reply.text


async def test_pending_updates_are_mentioned_first_and_attached(model: MockModel) -> None:
    pending = (
        PendingUpdate("dlv-1", "Done: github, jira and confluence"),
        PendingUpdate("dlv-2", "I could not complete slack (forbidden)."),
    )
    reply = await model.respond(turn("how is it going?", live=(BOOKING,), pending=pending))
    assert reply.text.startswith(
        "Before that: Done: github, jira and confluence. I could not complete slack (forbidden)."
    )
    assert "casa-pepe" in reply.text
    assert reply.attached == ("dlv-1", "dlv-2")
    with_call = await model.respond(turn("dame acceso a slack", pending=pending[:1]))
    assert with_call.text.startswith("Antes de nada: Done: github")
    assert with_call.attached == ("dlv-1",)
    assert calls_of(with_call) == [(ACCESS, {"accesses": ["slack"]})]
    accepted = await model.accept(
        turn("dame acceso a slack", pending=pending[:1]),
        with_call,
        [AdmissionNote("op-9", ACCESS, "admitted", "slack")],
    )
    assert accepted.startswith("Antes de nada: Done: github")
    assert "Me pongo con ello: slack." in accepted


async def test_replies_follow_the_language_of_the_text(model: MockModel) -> None:
    spanish = await model.respond(turn("¿cómo va?", language="en"))
    english = await model.respond(turn("how is it going?", language="es"))
    unclear = await model.respond(turn("ok", language="es"))
    assert spanish.text.startswith("Ahora mismo")
    assert english.text.startswith("Nothing")
    assert unclear.text.startswith("Ahora mismo no hay nada pendiente")


async def test_same_request_same_reply(model: MockModel) -> None:
    request = turn("give me access to github and jira, then send 5 euros to bob", live=LIVE)
    first = await model.respond(request)
    second = await MockModel().respond(request)
    assert first == second
    assert [c.call_id for c in first.calls] == [call_id("turn-1", 0), call_id("turn-1", 1)]
    other = await model.respond(turn("give me access to github", turn_id="turn-2"))
    assert other.calls[0].call_id == call_id("turn-2", 0) != first.calls[0].call_id


async def test_unknown_text_gets_a_helpful_answer(model: MockModel) -> None:
    reply = await model.respond(turn("purple elephants"))
    assert not reply.has_requests
    assert "give me access to" in reply.text


# -- the acceptance --------------------------------------------------------------------------


async def test_acceptance_says_started_never_done(model: MockModel) -> None:
    request = turn("give me access to github, jira and confluence")
    reply = await model.respond(request)
    notes = [
        AdmissionNote("op-1", ACCESS, "admitted", "github"),
        AdmissionNote("op-2", ACCESS, "admitted", "jira"),
        AdmissionNote("op-3", ACCESS, "rejected", "confluence", reason="forbidden"),
    ]
    text = await model.accept(request, reply, notes)
    assert text.startswith("I'm on it: github and jira.")
    assert "I couldn't start confluence because you do not have permission for it." in text
    assert not CLAIMS.search(text), text


async def test_acceptance_of_each_kind_of_request(model: MockModel) -> None:
    request = turn("x", live=LIVE)
    reply = TurnReply(
        "",
        cancels=(BOOKING.operation_id, JIRA.operation_id),
        confirmations=((TRANSFER.operation_id, True),),
        compensations=(GITHUB.operation_id,),
    )
    notes = [
        AdmissionNote(BOOKING.operation_id, BOOK, "cancel_requested", "casa-pepe"),
        AdmissionNote(
            JIRA.operation_id, ACCESS, "committed", "jira", reason="not_cancellable: committed"
        ),
        AdmissionNote(TRANSFER.operation_id, TRANSFER_TOOL, "admitted", "50.00 EUR to bob"),
        AdmissionNote("op-revoke", "revoke_access", "admitted", "github"),
    ]
    text = await model.accept(request, reply, notes)
    assert "I've asked to cancel casa-pepe" in text
    assert "I couldn't cancel jira: it had already gone through." in text
    assert "Thanks. I'm starting 50.00 EUR to bob." in text
    assert "I've started undoing github." in text
    assert not CLAIMS.search(text), text


async def test_acceptance_asks_for_confirmation_and_reports_repeats(model: MockModel) -> None:
    request = turn("transfiere 50 euros a bob-main")
    reply = await model.respond(request)
    notes = [
        AdmissionNote("op-t", TRANSFER_TOOL, "awaiting_confirmation", "50.00 EUR a bob-main"),
        AdmissionNote("op-g", ACCESS, "running", "github", existing=True),
        AdmissionNote("op-x", ACCESS, "rejected", "x", reason="over_limit: 5 per hour"),
    ]
    text = await model.accept(request, reply, notes)
    assert "50.00 EUR a bob-main necesita tu confirmación. ¿Lo hago? (sí/no)" in text
    assert "github ya está en marcha (en curso)." in text
    assert "No pude iniciar x porque supera tu límite (5 per hour)." in text
    assert not CLAIMS.search(text), text


async def test_acceptance_keeps_the_repeat_warning(model: MockModel) -> None:
    request = turn("send 50 euros to bob-main")
    reply = await model.respond(request)
    note = AdmissionNote(
        "op-t",
        TRANSFER_TOOL,
        "awaiting_confirmation",
        "50.00 EUR to bob-main",
        prompt="Please confirm transfer_money (...). You already did this once; do it again?",
    )
    assert await model.accept(request, reply, [note]) == (
        "50.00 EUR to bob-main needs your confirmation. You already did this once. "
        "Shall I go ahead? (yes/no)"
    )


async def test_acceptance_declined_confirmation(model: MockModel) -> None:
    request = turn("no", live=LIVE)
    reply = await model.respond(request)
    note = AdmissionNote(
        TRANSFER.operation_id, TRANSFER_TOOL, "rejected", "the transfer", "confirmation_declined"
    )
    assert await model.accept(request, reply, [note]) == "OK, I won't do the transfer."


# -- the failure explanation and the registry ------------------------------------------------


async def test_failure_explanation_offers_an_alternative() -> None:
    outcomes = [
        OperationOutcome("op-1", ACCESS, "github", "committed"),
        OperationOutcome("op-2", ACCESS, "slack", "failed_final", "forbidden: not allowed for you"),
    ]
    text = await get_model("mock").explain_failures(outcomes, language="en")
    assert text.startswith("Done: github.")
    assert "Alternative: an administrator can grant slack" in text


@pytest.mark.parametrize(
    ("text", "accesses"),
    [
        ("give me access to the repo named data-pipeline", ["data-pipeline"]),
        ("give me access to data-pipeline's repo", ["data-pipeline"]),
        ("I need access to github and the data-pipeline repo", ["github", "data-pipeline"]),
        ("grant me access to the repository called infra-tools and jira", ["infra-tools", "jira"]),
        ("dame acceso al repositorio llamado data-pipeline y a jira", ["data-pipeline", "jira"]),
        ("give me access to github and jira", ["github", "jira"]),
    ],
)
async def test_a_resource_named_with_its_kind_is_the_resource(
    model: MockModel, text: str, accesses: list[str]
) -> None:
    reply = await model.respond(turn(text))
    assert calls_of(reply) == [(ACCESS, {"accesses": accesses})]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("give me access to the repo and jira", "Which repo do you mean?"),
        ("give me access to the repo named", "Which repo do you mean?"),
        ("dame acceso al repositorio", "¿Qué repositorio?"),
    ],
)
async def test_a_resource_it_cannot_tell_is_asked_for(
    model: MockModel, text: str, words: str
) -> None:
    reply = await model.respond(turn(text))
    assert calls_of(reply) == []
    assert words in reply.text


async def test_an_unknown_outcome_is_said_as_unknown_never_as_retry_now() -> None:
    outcomes = [
        OperationOutcome(
            "op-1", "add_note", "a note", "failed_final",
            "unknown_outcome: no answer within 2 s; no lookup tool declared",
        ),
    ]
    text = await get_model("mock").explain_failures(outcomes, language="en")
    assert "I cannot tell whether it went through" in text
    assert "I did not send it again" in text
    assert "retry" not in text
    spanish = await get_model("mock").explain_failures(outcomes, language="es")
    assert "no sé si se hizo" in spanish


async def test_an_explicit_call_names_any_offered_tool_with_typed_arguments(
    model: MockModel,
) -> None:
    tools = (
        ToolSpec(
            name="open_ticket", description="Open a ticket.",
            parameters={"properties": {"customer": {"type": "string"},
                                       "priority": {"type": ["integer", "null"]}}},
        ),
    )
    reply = await model.respond(
        turn("call open_ticket with customer=ana, priority=2", tools=tools)
    )
    assert calls_of(reply) == [("open_ticket", {"customer": "ana", "priority": 2})]
    # A tool not offered, or an argument list that does not parse: not an explicit call.
    assert calls_of(await model.respond(turn("call close_ticket with id=7", tools=tools))) == []
    assert calls_of(await model.respond(turn("call open_ticket with nonsense", tools=tools))) == []
