"""Two surface processes admit one user's request at the same instant (real JetStream).

The end-to-end catalog drives one surface; this is the race between two of them, each
with an admission and a load view of its own: the loser of the intent claim must join the
winner's operation, not adopt its id as if the winner had crashed before writing.
"""

from __future__ import annotations

import asyncio
import uuid

from nats.js import JetStreamContext

from libs.admission import ELSEWHERE, Admission, LoadView, ToolCall, TurnContext
from libs.bus import Context, Topology, read_subject
from libs.events import BATCHES, OPERATIONS
from libs.tools import default_registry

from .checks import tag


def _turn(session_id: str, user_id: str) -> TurnContext:
    return TurnContext(
        session_id=session_id,
        turn_id=f"t_{uuid.uuid4().hex[:12]}",
        tenant_id="acme",
        user_id=user_id,
        agent="concierge",
    )


async def _kinds(
    js: JetStreamContext, topology: Topology, context: Context, session_id: str
) -> list[str]:
    codec = OPERATIONS if context is Context.OPERATIONS else BATCHES
    read = await read_subject(
        js, topology.stream_name(context), topology.session_filter(context, session_id), codec
    )
    return [tag(item) for item in read.items]


async def test_two_processes_admitting_one_users_request_at_once_make_one_operation(
    js: JetStreamContext, topology: Topology
) -> None:
    registry = default_registry()
    intents = await js.key_value(topology.bucket("intents"))
    processes = [Admission(js, topology, registry, LoadView(), intents) for _ in range(2)]
    user = f"u-{uuid.uuid4().hex[:8]}"
    sessions = [f"s_{uuid.uuid4().hex[:12]}" for _ in processes]
    call = ToolCall("provision_access", {"accesses": ["wiki"]}, "call_same")
    turns = await asyncio.gather(
        *(a.admit(_turn(s, user), [call]) for a, s in zip(processes, sessions, strict=True))
    )
    [op] = {t.outcomes[0].operation_id for t in turns}
    owners = [i for i, t in enumerate(turns) if not t.outcomes[0].existing]
    assert len(owners) == 1, [t.outcomes for t in turns]
    owner, joiner = owners[0], 1 - owners[0]
    # Admitted once, in the session that won the claim; its batch carries the closing.
    assert await _kinds(js, topology, Context.OPERATIONS, sessions[owner]) == [
        "operation.admitted"
    ]
    assert await _kinds(js, topology, Context.BATCHES, sessions[owner]) == ["batch.opened"]
    assert turns[owner].outcomes[0].reason is None
    # The joining session opened nothing, and admission says where the operation lives.
    assert await _kinds(js, topology, Context.OPERATIONS, sessions[joiner]) == []
    assert await _kinds(js, topology, Context.BATCHES, sessions[joiner]) == []
    joined = turns[joiner].outcomes[0]
    assert (joined.existing, joined.reason) == (True, ELSEWHERE)
    assert joined.batch_id == turns[owner].batch_id
    assert turns[joiner].batch_id is None
    assert joined.operation_id == op


async def test_a_claim_whose_admission_died_before_writing_is_adopted_after_the_grace(
    js: JetStreamContext, topology: Topology
) -> None:
    registry = default_registry()
    intents = await js.key_value(topology.bucket("intents"))
    user = f"u-{uuid.uuid4().hex[:8]}"
    call = ToolCall("provision_access", {"accesses": ["wiki"]}, "call_same")
    first = await Admission(js, topology, registry, LoadView(), intents).admit(
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
    turn = await Admission(js, topology, registry, LoadView(), intents).admit(
        _turn(session, user), [call]
    )
    waited = loop.time() - started
    # Given time to write first (it might have been a live racer), then adopted: the
    # orphaned id is admitted once, here, so its key still maps to one effect.
    assert turn.outcomes[0].operation_id == orphan
    assert (turn.outcomes[0].status, turn.outcomes[0].existing) == ("admitted", False)
    assert waited >= 2.5
    assert await _kinds(js, topology, Context.OPERATIONS, session) == ["operation.admitted"]
