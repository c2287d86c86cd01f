"""Two surface processes admit one user's request at the same instant (real JetStream).

The end-to-end catalog drives one surface; here two `python -m services.interaction_surface`
processes on one broker and one stream prefix take the same request of one user, from two
of the user's sessions, at the same time, round after round. Each process has an admission
and a load view of its own, so neither can see the other's operation in time: only the
create-once intent claim in `hl_intents` keeps the intent to one operation. The loser of
the claim joins the winner's operation (`handled_elsewhere`); it must not adopt the id as
if the winner had crashed before writing, nor admit a second operation.

The last test stays in process: it fakes an admission that died between its claim and its
first event, which no real process can be made to do on cue.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext

from libs.admission import Admission, LoadView, ToolCall, TurnContext
from libs.bus import Context, NatsEventStore, Topology, connect, read_subject
from libs.config import BusSettings
from libs.events import OPERATIONS
from libs.tools import default_registry
from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, open_chat, running_stack, unique

from .checks import closed_once, durable, effects_of, tag

# Bounded: each round is one race; the closings are then checked together.
ROUNDS = 8


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, the surface twice on the same broker and prefix."""
    with running_stack(
        broker.url, tmp_path_factory.mktemp("race"), "r", second_surface_env={}
    ) as running:
        yield running


@pytest.fixture
async def surfaces(stack: SurfaceStack) -> AsyncIterator[tuple[httpx.AsyncClient, ...]]:
    """An HTTP client on each surface process."""
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=15.0) as one,
        httpx.AsyncClient(base_url=stack.second_url, timeout=15.0) as two,
    ):
        yield one, two


async def _admitted_per_intent(stack: SurfaceStack) -> Counter[str]:
    """`operation.admitted` events per intent key in the whole operations stream."""
    topology = Topology(stack.prefix)
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="race")
    try:
        read = await read_subject(
            nc.jetstream(),
            topology.stream_name(Context.OPERATIONS),
            topology.context_filter(Context.OPERATIONS),
            OPERATIONS,
        )
    finally:
        await nc.close()
    assert not read.rejected, read.rejected
    return Counter(
        str(item.envelope.intent_key) for item in read.items if tag(item) == "operation.admitted"
    )


async def test_two_surface_processes_taking_one_users_request_at_once_do_it_once(
    stack: SurfaceStack, surfaces: tuple[httpx.AsyncClient, ...]
) -> None:
    races: list[tuple[str, list[Chat], list[dict[str, Any]]]] = []
    for _ in range(ROUNDS):
        user = unique("u")
        # One session opened on each process; each turn goes to the process that opened it.
        chats = [await open_chat(client, user=user) for client in surfaces]
        name = unique("wiki")
        # Both sent before either answers: with the claim skipped, 7 of 8 rounds admitted
        # the intent twice (each process's view had not yet seen the other's operation).
        answers = await asyncio.gather(*(c.say(f"give me access to {name}") for c in chats))
        races.append((name, chats, list(answers)))
    ops = {name: {o["operation_id"] for a in answers for o in a["operations"]}
           for name, _, answers in races}
    doubled = {name: found for name, found in ops.items() if len(found) != 1}
    assert not doubled, f"{len(doubled)} of {ROUNDS} races made other than one operation"
    keys: dict[str, str] = {}
    closings = []
    for name, chats, answers in races:
        [op] = ops[name]
        records = [await durable(stack, c.session_id) for c in chats]
        admitted_in = [
            i for i, r in enumerate(records)
            if "operation.admitted" in r.kinds(Context.OPERATIONS, operation_id=op)
        ]
        assert len(admitted_in) == 1, f"{name}: admitted in sessions {admitted_in}"
        owner, joiner = admitted_in[0], 1 - admitted_in[0]
        [admitted] = [
            i for i in records[owner].events[Context.OPERATIONS] if tag(i) == "operation.admitted"
        ]
        keys[name] = str(admitted.envelope.intent_key)
        [batch] = {o["batch_id"] for o in answers[owner]["operations"]}
        assert records[owner].kinds(Context.BATCHES, batch_id=batch)[:1] == ["batch.opened"]
        assert "let you know" in answers[owner]["reply"]["text"]
        # The loser joined the winner's operation and batch, and was told where it runs
        # (docs/architecture.md, Admission: `handled_elsewhere`, no update promised).
        [joined] = answers[joiner]["operations"]
        assert (joined["operation_id"], joined["tool"], joined["batch_id"]) == (
            op, "provision_access", batch,
        )
        told = answers[joiner]["reply"]["text"]
        assert "another conversation of yours" in told, told
        assert "let you know" not in told
        for context in (Context.OPERATIONS, Context.BATCHES, Context.DELIVERIES):
            assert records[joiner].events[context] == [], f"{name}: {context} in the loser"
        closings.append(closed_once(stack, chats[owner], batch, {op: "committed"}))
    # One final delivery per intent, said once, in the session that admitted it.
    await asyncio.gather(*closings)
    for name, chats, _ in races:
        snaps = [await c.snapshot() for c in chats]
        assert sorted(len(s["deliveries"]) for s in snaps) == [0, 1], f"{name}: {snaps}"
    # Exactly one admitted operation per intent key in the durable streams, and exactly
    # one effect per intent in the provider's ledger.
    assert len(set(keys.values())) == ROUNDS
    per_key = await _admitted_per_intent(stack)
    assert {name: per_key[key] for name, key in keys.items()} == dict.fromkeys(keys, 1)
    assert await effects_of(stack, *keys) == dict.fromkeys(keys, 1)


def _turn(session_id: str, user_id: str) -> TurnContext:
    return TurnContext(
        session_id=session_id,
        turn_id=f"t_{uuid.uuid4().hex[:12]}",
        tenant_id="acme",
        user_id=user_id,
        agent="concierge",
    )


async def _operation_kinds(js: JetStreamContext, topology: Topology, session_id: str) -> list[str]:
    read = await read_subject(
        js,
        topology.stream_name(Context.OPERATIONS),
        topology.session_filter(Context.OPERATIONS, session_id),
        OPERATIONS,
    )
    return [tag(item) for item in read.items]


async def test_a_claim_whose_admission_died_before_writing_is_adopted_after_the_grace(
    js: JetStreamContext, topology: Topology
) -> None:
    registry = default_registry()
    intents = await js.key_value(topology.bucket("intents"))
    user = f"u-{uuid.uuid4().hex[:8]}"
    call = ToolCall("provision_access", {"accesses": ["wiki"]}, "call_same")
    first = await Admission(NatsEventStore(js, {}), topology, registry, LoadView(), intents).admit(
        _turn(f"s_{uuid.uuid4().hex[:12]}", user), [call]
    )
    key = first.outcomes[0].intent_key
    assert key is not None
    entry = await intents.get(key)
    _, _, held_digest = (entry.value or b"").decode().partition("|")
    # A process claimed the intent again and died before writing a single event.
    orphan = f"op_{uuid.uuid4().hex[:20]}"
    await intents.put(key, f"{orphan}|{held_digest}".encode())
    session = f"s_{uuid.uuid4().hex[:12]}"
    loop = asyncio.get_running_loop()
    started = loop.time()
    turn = await Admission(NatsEventStore(js, {}), topology, registry, LoadView(), intents).admit(
        _turn(session, user), [call]
    )
    waited = loop.time() - started
    # Given time to write first (it might have been a live racer), then adopted: the
    # orphaned id is admitted once, here, so its key still maps to one effect.
    assert turn.outcomes[0].operation_id == orphan
    assert (turn.outcomes[0].status, turn.outcomes[0].existing) == ("admitted", False)
    assert waited >= 2.5
    assert await _operation_kinds(js, topology, session) == ["operation.admitted"]
