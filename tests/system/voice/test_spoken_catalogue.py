"""The demo's catalogue on a real call (espeak-ng audio, the offline recognizer): a request
the recognizer hears surely is granted with no question; a question left unanswered by a
dropped call is asked again on the session's next call, and its answer acts."""

from __future__ import annotations

from typing import Any

import httpx

from testkit.phone import speech
from testkit.surface import Chat, SurfaceStack, effects, eventually, open_chat
from testkit.voice import call_in, delivery_with, events_of


async def _replies(chat: Chat, count: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        found = await events_of(chat, "turn.replied")
        return found if len(found) >= count else None

    return await eventually(enough, timeout_s=30)


async def test_github_and_jira_on_the_phone_are_granted_with_no_question(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    await phone.talk(await speech("give me access to github and jira"))
    reply = (await _replies(chat, 1))[0]
    heard = (await events_of(chat, "turn.received"))[0]["data"]["text"]
    assert heard == "give me access to github and jira"
    assert not reply["data"]["text"].startswith("Did you say")
    assert await events_of(chat, "hearing.asked") == []
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
    snapshot = await chat.snapshot()
    operations = snapshot["operations"]
    assert sorted(o["status"] for o in operations) == ["committed"] * 2
    assert {o["turn_id"] for o in operations} == {reply["turn_id"]}
    for name in ("github", "jira"):
        assert await effects(stack, name) == 1
    closings = [m for m in snapshot["messages"] if m["delivery_id"] is not None]
    assert [m["delivery_id"] for m in closings] == [spoken["delivery_id"]]
    assert len(await events_of(chat, "turn.received")) == 1
    await phone.hang_up()


async def test_a_question_a_dropped_call_left_is_asked_again_on_the_next_call(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    first = await call_in(stack.url, chat)
    # "vault" is no name of the catalogue: the recognizer hears a name it is unsure of.
    await first.talk(await speech("give me access to github and vault"))
    question = (await _replies(chat, 1))[0]
    assert question["data"]["text"].startswith("Did you say github and ")
    asked = (await eventually(lambda: events_of(chat, "hearing.asked"), timeout_s=20))[0]
    assert asked["data"]["question"] == question["data"]["text"]
    assert asked["data"]["connection_id"] == f"call_{first.call_sid}"
    assert asked["turn_id"] == question["turn_id"]
    # The caller hangs up before answering: nothing is admitted, the question stays.
    await first.hang_up()
    assert (await chat.snapshot())["operations"] == []
    second = await call_in(stack.url, chat)
    again = f"line-call_{second.call_sid}-again"

    async def asked_again() -> bool | None:
        return any(u.mark == again for u in second.utterances) or None

    await eventually(asked_again, timeout_s=20)
    started = await events_of(chat, "playback.started", playback_id=again)
    assert started[0]["data"]["text"] == question["data"]["text"]
    await second.wait_for(again, timeout_s=20, returned=True)
    await second.press("1")

    async def admitted() -> list[dict[str, Any]] | None:
        return (await chat.snapshot())["operations"] or None

    operations = await eventually(admitted, timeout_s=20)
    turns = await events_of(chat, "turn.received")
    assert turns[-1]["data"]["text"] == asked["data"]["text"]
    assert turns[-1]["data"]["client_turn_id"] == f"heard-call_{second.call_sid}-1"
    assert {o["turn_id"] for o in operations} == {turns[-1]["turn_id"]}
    settled = await eventually(lambda: events_of(chat, "hearing.settled"), timeout_s=20)
    assert [s["data"]["answer"] for s in settled] == ["yes"]
    # Settled: a third call asks nothing.
    third = await call_in(stack.url, chat)
    await third.talk(await speech("thank you"))
    await _replies(chat, 3)
    assert not any(u.mark.endswith("-again") for u in third.utterances)
    await third.hang_up()
    await second.hang_up()
