"""The timeline's diagnosis answers the seed's production questions for one session."""

from __future__ import annotations

from typing import Any

import httpx

from services.interaction_surface.core.diagnosis import diagnose
from testkit.surface import eventually, fault, open_chat, unique

from .observed import ObservedStack


async def test_timeline_says_who_duplicated_a_request(observed: ObservedStack) -> None:
    stack = observed.stack
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        chat = await open_chat(client)
        name = unique("grafana")
        await fault(stack, match=name, status=503, times=1)
        # The model names it twice in one turn, our worker retries it, the user asks again.
        first = await chat.say(f"give me access to {name} and {name}")
        [op_id] = {o["operation_id"] for o in first["operations"]}

        async def done() -> bool:
            snap = await chat.snapshot()
            return any(d["status"] == "delivered" for d in snap["deliveries"])

        await eventually(done)
        await chat.say(f"give me access to {name}")
        response = await client.get(f"/v1/sessions/{chat.session_id}/timeline", headers=chat.auth)
    assert response.status_code == 200
    body = response.json()
    assert body["events"]
    diagnosis = body["diagnosis"]
    answers = diagnosis["answers"]
    assert answers["model_duplicated_a_request"]
    assert answers["request_repeated_in_a_later_turn"]
    assert answers["our_retries_sent_again"]
    assert not answers["closing_said_before_commit"]
    assert not answers["handoff_lost_a_result"]
    assert not answers["unknown_left_unresolved"]
    by = {d["by"]: d for d in diagnosis["duplicates"]}
    assert by["model"]["operation_id"] == op_id
    assert by["retry"]["idempotency_key"] == op_id
    assert by["retry"]["attempts"] >= 2


async def test_timeline_shows_a_result_a_handoff_suppressed(observed: ObservedStack) -> None:
    async with httpx.AsyncClient(base_url=observed.stack.url, timeout=15.0) as client:
        chat = await open_chat(client, agent="concierge")
        place = unique("casa")
        # The read outlives the handoff even on a loaded machine, so its result can only be
        # judged after it (a fast one could be attached to the turn's own reply first).
        await fault(observed.stack, match=place, latency_ms=3000, times=1)
        await chat.typing(True)
        await chat.say(f"check availability at {place} for 2026-12-24")
        await chat.handoff("billing", context="fresh")

        async def diagnosed() -> dict[str, Any] | None:
            response = await client.get(
                f"/v1/sessions/{chat.session_id}/timeline", headers=chat.auth
            )
            diagnosis: dict[str, Any] = response.json()["diagnosis"]
            return diagnosis if diagnosis["answers"]["handoff_lost_a_result"] else None

        # Generous: on a loaded machine the read, the handoff and the gate's decision queue.
        diagnosis = await eventually(diagnosed, timeout_s=45.0)
    [lost] = diagnosis["handoff_losses"]
    assert lost["reason"].startswith("agent_not_allowed")
    assert (lost["handoff"]["from_agent"], lost["handoff"]["to_agent"]) == ("concierge", "billing")


async def test_the_demo_page_has_a_diagnosis_card(observed: ObservedStack) -> None:
    async with httpx.AsyncClient(base_url=observed.stack.url, timeout=15.0) as client:
        page = await client.get("/")
        script = await client.get("/static/diagnosis.js")
    assert page.status_code == 200
    assert 'id="diagnosis"' in page.text
    assert '<script src="/static/diagnosis.js"></script>' in page.text
    assert script.status_code == 200
    # Every answer the endpoint gives has a question on the card.
    for key in diagnose([])["answers"]:
        assert key in script.text
