"""Two surface processes on the same streams: only the call's owner speaks its deliveries,
and a surface killed mid-playback leaves its delivery to the next contact, once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from libs.bus.consumer import STANDING_PULL_FETCHES
from testkit.drained import settled
from testkit.phone import Phone
from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, eventually, open_chat
from testkit.voice import (
    call_in,
    closing_on_a_dead_line,
    delivery_with,
    events_of,
    heard,
    ledger,
    unique,
    voice_stack,
)

pytestmark = pytest.mark.timeout(120)

# Longer than a consumer's standing pull request lives (two 1 s fetch timeouts), with a
# margin for a loaded machine.
PULL_EXPIRY_S = STANDING_PULL_FETCHES * 1.0 + 0.5


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, with a second surface on the same prefix."""
    with voice_stack(
        broker, tmp_path_factory.mktemp("ownership"),
        env={"HOLDLINE_CALL_OWNER_TTL_S": "8"}, second_surface_env={},
    ) as running:
        yield running


async def sent_events(chat: Chat, delivery_id: str) -> list[dict[str, Any]]:
    return await events_of(chat, "delivery.sent", delivery_id=delivery_id)


async def test_only_the_surface_holding_the_call_speaks_its_deliveries(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    # The chat lives on the first surface, the call on the second; both consume deliveries.
    chat = await open_chat(client)
    phone = await call_in(stack.second_url, chat, speed=4.0)
    owner = stack.procs["second_surface"]
    names = [unique("own"), unique("ownpaused")]
    spoken_ids: list[str] = []
    for index, name in enumerate(names):
        if index == 1:
            # The owner stops fetching, so the other surface is the one that consumes this
            # closing once the owner's last pull request has expired. The broker does not
            # say whose pull requests wait, so this is a window: longer than the owner's
            # standing pull request's life (libs/bus/consumer.py).
            owner.pause()
            await asyncio.sleep(PULL_EXPIRY_S)
        try:
            await chat.say(f"give me access to {name}")
            if index == 1:
                decided = await eventually(lambda: _handed_over(chat, spoken_ids), timeout_s=15)
                # The other surface has consumed it (and everything else is handled); it
                # must not have gone to chat.
                await settled(stack)
                assert not await events_of(chat, "delivery.sent", delivery_id=decided)
        finally:
            if index == 1:
                owner.resume()

        async def new_spoken() -> str | None:
            for d in (await chat.snapshot())["deliveries"]:
                if d["status"] == "spoken" and d["delivery_id"] not in spoken_ids:
                    return str(d["delivery_id"])
            return None

        delivery_id = await eventually(new_spoken, timeout_s=25)
        spoken_ids.append(delivery_id)
        utterance = await heard(phone, chat, delivery_id)
        assert utterance.mark == delivery_id
        sent = await sent_events(chat, delivery_id)
        assert [e["data"]["channel"] for e in sent] == ["voice"]
    # Nothing went to chat behind the call's back; every closing is in history once.
    assert not await events_of(chat, "delivery.delivered")
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert sorted(m["delivery_id"] for m in messages) == sorted(spoken_ids)
    assert not phone.clears
    for name in names:
        assert await ledger(stack, name) == 1
    await phone.hang_up()


async def _handed_over(chat: Chat, done: list[str]) -> str | None:
    """A new closing the policy decided to say now."""
    for event in await events_of(chat, "delivery.decided"):
        if event["delivery_id"] not in done and event["data"]["decision"] == "deliver_now":
            return str(event["delivery_id"])
    return None


async def test_a_surface_killed_mid_playback_leaves_the_closing_to_the_next_call(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    params = {"session_id": chat.session_id, "token": chat.token}
    # The line never plays: the closing stays `sent` on the second surface's call.
    doomed, name, delivery_id = await closing_on_a_dead_line(stack.second_url, chat, "ownkill")
    first = {"delivery_id": delivery_id}
    stack.procs["second_surface"].kill9()
    try:
        # The survivor notices the owner's key expired and puts the closing back.
        unheard = await eventually(
            lambda: events_of(chat, "delivery.unheard", delivery_id=first["delivery_id"]),
            timeout_s=30,
        )
        assert [e["data"]["reason"] for e in unheard] == ["call_lost"]
        lost = [e for e in await events_of(chat, "channel.disconnected")
                if e["data"]["reason"] == "owner_lost"]
        assert [e["data"]["connection_id"] for e in lost] == [f"call_{doomed.call_sid}"]
        assert not [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
        # The next contact is a call on the surviving surface: it hears the closing, once.
        phone = Phone(stack.url, params, speed=4.0)
        await phone.dial()
        spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=25)
        assert spoken["delivery_id"] == first["delivery_id"]
        again = await heard(phone, chat, first["delivery_id"])
        assert not again.flushed
        sent = await sent_events(chat, first["delivery_id"])
        assert [e["data"]["channel"] for e in sent] == ["voice", "voice"]
        messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
        assert [m["delivery_id"] for m in messages] == [first["delivery_id"]]
        assert await ledger(stack, name) == 1
        await phone.hang_up()
    finally:
        with contextlib.suppress(ConnectionClosed, OSError):
            await doomed.hang_up(stop=False)
        stack.procs["second_surface"].start()
