"""Telling a caller from a cough, on a real call: sounds that are not the caller's speech
never cut the agent nor become a turn; real speech still cuts at once; a backchannel does
not end the agent's turn; a doubtful hearing is confirmed before anything is admitted.

Stimuli are made deterministically (`stimuli.py`), at the caller's own speech level (and
background talk 14 dB below it), after the caller has spoken once, so the call knows
their level. Assertions are on what the phone received (marks, clears, the audio bytes,
the gaps in its playout) and on the durable history.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from services.interaction_surface.voice.codec import silence_ulaw
from services.interaction_surface.voice.engines.base import synthesize
from services.interaction_surface.voice.engines.espeak import EspeakTts
from testkit import stimuli
from testkit.phone import Phone, speech
from testkit.surface import Chat, SurfaceStack, eventually, fault, open_chat
from testkit.voice import SPOKEN_REQUEST, SPOKEN_RESOURCES, call_in, events_of, ledger


async def _spoken_request(stack: SurfaceStack, chat: Chat, latency_ms: int) -> tuple[Phone, bytes]:
    """A call on which the caller asked for two accesses (the provider is slow): the phone
    and the request's audio (the caller's level)."""
    phone = await call_in(stack.url, chat)
    for name in SPOKEN_RESOURCES:
        await fault(stack, match=name, latency_ms=latency_ms, times=1)
    request = await speech(SPOKEN_REQUEST)
    await phone.talk(request)
    return phone, request


async def _reply(chat: Chat) -> dict[str, Any]:
    replies = await eventually(lambda: events_of(chat, "turn.replied"), timeout_s=20)
    return replies[0]


async def test_noises_and_background_talk_over_the_agent_neither_cut_nor_become_a_turn(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone, request = await _spoken_request(stack, chat, latency_ms=9000)
    reply = await _reply(chat)
    await phone.wait_audio()
    level = stimuli.speech_level(request)
    gap = silence_ulaw(250)
    other = await synthesize(EspeakTts(), "and then she told me the train was late again")
    noises = (
        stimuli.at_level(stimuli.cough(), level) + gap
        + stimuli.at_level(stimuli.knock(), level) + gap
        + stimuli.at_level(stimuli.breath(), level) + gap
        + stimuli.at_level(stimuli.hiss(), level) + gap
        + stimuli.attenuate(stimuli.at_level(other, level), 14) + silence_ulaw(600)
    )
    await phone.talk(noises)
    acceptance = await phone.wait_for(reply["response_id"], timeout_s=20, returned=True)
    # Nothing was cut: the reply played whole, every byte once and in order, with no
    # silence in it longer than a false alarm may leave.
    assert not phone.clears
    assert not acceptance.flushed
    assert acceptance.audio == await synthesize(EspeakTts(), reply["data"]["text"])
    assert max(acceptance.gaps, default=0.0) < 0.6
    # Nothing became speech or a turn: the record has the one request only.
    assert len(await events_of(chat, "speech.started")) == 1
    assert [t["data"]["text"] for t in await events_of(chat, "turn.received")] == [
        SPOKEN_REQUEST
    ]
    assert not await events_of(chat, "control.barge_in")
    finished = await events_of(chat, "playback.finished", response_id=reply["response_id"])
    assert [e["data"]["heard"] for e in finished] == [True]
    # Real speech over the closing still cuts it, at once.
    closing = await eventually(lambda: _playing(phone, chat), timeout_s=25)
    spoke_at = time.monotonic()
    await phone.talk(await speech("wait one moment please"))
    assert phone.clears, f"real speech did not cut the closing {closing}"
    assert phone.clears[0] - spoke_at < 1.0
    barge = await eventually(lambda: events_of(chat, "control.barge_in"), timeout_s=10)
    assert len(barge) == 1
    await phone.hang_up()


async def _playing(phone: Phone, chat: Chat) -> str | None:
    """The closing's delivery id once its audio is arriving (sent, its mark not yet)."""
    sent = await events_of(chat, "delivery.sent")
    arriving = phone.media_ms() > sum(u.audio_ms for u in phone.utterances)
    return str(sent[0]["delivery_id"]) if sent and arriving else None


async def test_a_backchannel_does_not_end_the_agents_turn(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone, _ = await _spoken_request(stack, chat, latency_ms=6000)
    reply = await _reply(chat)
    response_id = reply["response_id"]
    await phone.wait_audio()
    await phone.talk(silence_ulaw(800) + await speech("uh huh"))
    backchannel = await eventually(lambda: events_of(chat, "control.backchannel"), timeout_s=15)
    assert backchannel[0]["data"]["continued"] is True
    # The agent carries on from its first unheard word, and the turn is not over: no new
    # turn, no truncated reply, the reply in history once and whole.
    resumed = await phone.wait_for(f"{response_id}.resume1", timeout_s=20, returned=True)
    assert not resumed.flushed
    assert reply["data"]["text"].endswith(
        (await events_of(chat, "playback.started", playback_id=resumed.mark))[0]["data"]["text"]
    )
    assert len(await events_of(chat, "turn.received")) == 1
    assert not await events_of(chat, "reply.truncated", response_id=response_id)
    messages = [m for m in (await chat.snapshot())["messages"] if m["role"] == "assistant"]
    assert [m["text"] for m in messages][:1] == [reply["data"]["text"]]
    await phone.hang_up()


async def test_a_doubtful_request_is_confirmed_before_anything_is_admitted(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    # "vault" is no name of the catalogue: the recogniser hears a name it is unsure of.
    said = "give me access to github and vault"
    await phone.talk(await speech(said))
    first = await _reply(chat)
    heard = (await events_of(chat, "turn.received"))[0]["data"]["text"]
    assert first["data"]["text"].startswith("Did you say github and ")
    assert heard.startswith("give me access to github")
    assert (await chat.snapshot())["operations"] == []
    # "2": no, nothing is done.
    await phone.wait_for(first["response_id"], timeout_s=20, returned=True)
    await phone.press("2")
    await eventually(lambda: _said_on_the_call(phone, "line-"), timeout_s=20)
    assert (await chat.snapshot())["operations"] == []
    # Asked again and confirmed with "1": admitted as heard, once.
    await phone.talk(await speech(said))

    async def asked_again() -> list[dict[str, Any]] | None:
        replies = await events_of(chat, "turn.replied")
        return replies if len(replies) == 2 else None

    second = (await eventually(asked_again, timeout_s=20))[1]
    assert second["data"]["text"].startswith("Did you say")
    assert (await chat.snapshot())["operations"] == []
    await phone.press("1")

    async def admitted() -> list[dict[str, Any]] | None:
        ops = (await chat.snapshot())["operations"]
        return ops or None

    operations = await eventually(admitted, timeout_s=20)
    turns = await events_of(chat, "turn.received")
    assert turns[-1]["data"]["client_turn_id"] == f"heard-call_{phone.call_sid}-2"
    # The request that runs is the one the question was about: the second hearing.
    assert turns[-1]["data"]["text"] == turns[1]["data"]["text"]
    assert turns[1]["data"]["text"].startswith("give me access to github")
    assert {o["turn_id"] for o in operations} == {turns[-1]["turn_id"]}
    assert await eventually(lambda: _effects(stack, "github"), timeout_s=20) == 1
    await phone.hang_up()


async def _said_on_the_call(phone: Phone, prefix: str) -> bool:
    return any(u.mark.startswith(prefix) for u in phone.utterances)


async def _effects(stack: SurfaceStack, resource: str) -> int | None:
    count = await ledger(stack, resource)
    return count or None
