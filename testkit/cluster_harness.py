"""The whole system on a three-node cluster, and the checks every cluster fault ends with.

Two surfaces, two workers, and the coordinator and the policy as two partitions each run on
a `Cluster` whose streams are all R3. Conversations are driven over both surfaces; what
they answered 2xx for is remembered (`Acked`, as the chaos harness does). After a fault the
checks replay every stream from a fresh connection and compare it with the provider's
ledger, with what was acknowledged, and with both surfaces' live snapshots.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import nats.errors

from libs.bus import Context, Topology
from testkit.chaos.checks import (
    Replayed,
    Verdict,
    check_acknowledged,
    check_batches,
    check_effects,
    check_projections,
    replay_all,
)
from testkit.chaos.driver import Acked
from testkit.cluster import Cluster
from testkit.surface import Chat, SurfaceStack, eventually, open_chat, unique

# Fast failure detection on the client side: a paused node is left after ~3 s of silence.
CLUSTER_ENV = {
    "HOLDLINE_STREAM_REPLICAS": "3",
    "HOLDLINE_PARTITIONS": "2",
    "HOLDLINE_PARTITION": "0",
    "HOLDLINE_NATS_PING_INTERVAL_S": "1",
    "HOLDLINE_NATS_MAX_OUTSTANDING_PINGS": "2",
    "HOLDLINE_NATS_RECONNECT_WAIT_S": "0.2",
    "HOLDLINE_APPEND_RETRY_S": "15",
}
EXTRA = {
    "operation_worker_2": ("operation_worker", {"HOLDLINE_WORKER_ID": "w2"}),
    "batch_coordinator_p1": ("batch_coordinator", {"HOLDLINE_PARTITION": "1"}),
    "delivery_policy_p1": ("delivery_policy", {"HOLDLINE_PARTITION": "1"}),
}
# Provider latency held by every effect of a batch in flight when a node is killed.
PROVIDER_LATENCY_MS = 1500


def cluster_stack(cluster: Cluster, logs: Any) -> SurfaceStack:
    """The system's processes on the cluster (not started)."""
    return SurfaceStack(
        nats_url=cluster.url,
        prefix=f"k{uuid.uuid4().hex[:10]}",
        logs=logs,
        env=dict(CLUSTER_ENV),
        second_surface_env={},
        extra=dict(EXTRA),
    )


@dataclass
class Conversations:
    """Chats over both surfaces, and everything the surfaces acknowledged."""

    stack: SurfaceStack
    acked: Acked = field(default_factory=Acked)
    chats: list[Chat] = field(default_factory=list)
    # batch_id -> the chat that opened it
    batches: dict[str, Chat] = field(default_factory=dict)
    clients: list[httpx.AsyncClient] = field(default_factory=list)
    latency_ms: int = PROVIDER_LATENCY_MS
    # Sessions driven through the Agent API (tool calls; closings fetched and attached).
    agents: set[str] = field(default_factory=set)

    async def __aenter__(self) -> Conversations:
        self.clients = [
            httpx.AsyncClient(base_url=url, timeout=30.0)
            for url in (self.stack.url, self.stack.second_url)
        ]
        return self

    async def __aexit__(self, *_: object) -> None:
        for client in self.clients:
            await client.aclose()

    def other(self, chat: Chat) -> Chat:
        """The same session seen through the other surface."""
        client = self.clients[1] if chat.client is self.clients[0] else self.clients[0]
        return Chat(client, chat.session_id, chat.token, chat.agent)

    async def open(self, count: int) -> list[Chat]:
        """`count` sessions, alternately created on each surface."""
        opened = await asyncio.gather(
            *(open_chat(self.clients[(len(self.chats) + i) % 2]) for i in range(count))
        )
        for chat in opened:
            self.acked.tokens[chat.session_id] = chat.token
        self.chats.extend(opened)
        return list(opened)

    async def ask(self, chat: Chat, *, resources: int = 2, other_surface: bool = False) -> str:
        """One turn admitting a batch of accesses (held by provider latency); its batch id."""
        names = [unique("repo") for _ in range(resources)]
        speaker = self.other(chat) if other_surface else chat
        for name in names:
            await self._fault(match=name, latency_ms=self.latency_ms, times=1)
        answer = await self.say(speaker, "give me access to " + " and ".join(names))
        self.acked.turns[answer["turn_id"]] = chat.session_id
        for op in answer["operations"]:
            self.acked.operations[op["operation_id"]] = chat.session_id
        batch = str(answer["operations"][0]["batch_id"])
        self.batches[batch] = chat
        return batch

    async def open_agents(self, count: int) -> list[Chat]:
        """`count` sessions an external agent drives through the Agent API."""
        opened = await self.open(count)
        self.agents.update(c.session_id for c in opened)
        return opened

    async def call_tools(self, chat: Chat, *, other_surface: bool = False) -> str:
        """One Agent API request of two tool calls (one batch, held by provider latency)."""
        names = [unique("box") for _ in range(2)]
        for name in names:
            await self._fault(match=name, latency_ms=self.latency_ms, times=1)
        speaker = self.other(chat) if other_surface else chat
        body = {
            "calls": [
                {"tool_call_id": f"tc-{uuid.uuid4().hex[:10]}", "name": "provision_access",
                 "arguments": {"accesses": [name]}}
                for name in names
            ]
        }
        answer = await self._post(speaker, f"/v1/sessions/{chat.session_id}/tool-calls", body)
        self.acked.turns[answer["turn_id"]] = chat.session_id
        for result in answer["results"]:
            for op in result["operations"]:
                self.acked.operations[op["operation_id"]] = chat.session_id
        batch = str(answer["batch_id"])
        self.batches[batch] = chat
        return batch

    async def _post(
        self, chat: Chat, path: str, body: dict[str, Any], timeout_s: float = 30.0
    ) -> dict[str, Any]:
        # Repeated while the surface answers 503 (an election): tool_call_ids and
        # client_turn_ids make the repeat answer once, never run twice.
        deadline = time.monotonic() + timeout_s
        while True:
            response = await chat.client.post(path, json=body, headers=chat.auth)
            # 503: the broker is between leaders; 409: the first try is still being answered.
            if response.status_code not in {409, 503} or time.monotonic() >= deadline:
                break
            self.acked.requests[f"request_{response.status_code}"] += 1
            await asyncio.sleep(0.5)
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    async def _attach(self, chat: Chat, delivery_id: str) -> None:
        """What an agent does with an update it found no moment to say: it fetches the
        pending updates and attaches this one to its next model turn."""
        response = await chat.client.get(
            f"/v1/sessions/{chat.session_id}/pending", headers=chat.auth
        )
        if response.status_code != 200:
            return
        if delivery_id not in {d["delivery_id"] for d in response.json()["deliveries"]}:
            return
        await chat.client.post(
            f"/v1/sessions/{chat.session_id}/deliveries/{delivery_id}/ack",
            json={"status": "attached", "turn_id": f"agent-{delivery_id[-8:]}"},
            headers=chat.auth,
        )

    async def say(self, chat: Chat, text: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """A turn, repeated under its `client_turn_id` while the surface answers 503 (what a
        client does during an election: the repeat is answered once, never run twice)."""
        body = {"text": text, "client_turn_id": f"ct-{uuid.uuid4().hex[:12]}"}
        return await self._post(chat, f"/v1/sessions/{chat.session_id}/turns", body, timeout_s)

    async def ask_all(self, chats: list[Chat], **options: Any) -> list[str]:
        """One batch in every session (a chat turn, or tool calls for an agent's session),
        alternating between the surfaces."""
        return list(
            await asyncio.gather(
                *(
                    self.call_tools(c, other_surface=i % 2 == 1)
                    if c.session_id in self.agents
                    else self.ask(c, other_surface=i % 2 == 1, **options)
                    for i, c in enumerate(chats)
                )
            )
        )

    async def _fault(self, **body: Any) -> None:
        async with httpx.AsyncClient(base_url=self.stack.provider_url, timeout=10) as http:
            response = await http.post("/admin/faults", json=body)
            assert response.status_code == 201, response.text

    async def closed_at(self, batch: str, timeout_s: float = 60.0) -> datetime:
        """When the batch's closing was delivered (the event's time), waiting for it."""
        chat = self.batches[batch]

        async def delivered() -> datetime | None:
            # While a stream elects a leader the surface may answer 503 (retry): not yet.
            response = await _poll(chat, f"/v1/sessions/{chat.session_id}")
            if response is None or response.status_code == 503:
                return None
            assert response.status_code == 200, response.text
            snap = response.json()
            finals = [
                d for d in snap["deliveries"] if d["batch_id"] == batch and d["kind"] == "final"
            ]
            if finals and finals[0]["status"] != "delivered" and chat.session_id in self.agents:
                await self._attach(self.other(chat), finals[0]["delivery_id"])
                return None
            if not finals or finals[0]["status"] != "delivered":
                return None
            response = await _poll(chat, f"/v1/sessions/{chat.session_id}/timeline")
            if response is None or response.status_code == 503:
                return None
            for event in response.json()["events"]:
                if (
                    event["type"] == "delivery.delivered"
                    and event.get("delivery_id") == finals[0]["delivery_id"]
                ):
                    return datetime.fromisoformat(event["occurred_at"])
            return None

        return await eventually(delivered, timeout_s=timeout_s, every_s=0.2)

    async def close_times(self, batches: list[str], since: datetime) -> list[float]:
        """Seconds from `since` to each batch's closing."""
        found = await asyncio.gather(*(self.closed_at(b) for b in batches))
        return [(at - since).total_seconds() for at in found]


def now() -> datetime:
    """Wall-clock time, comparable with the events' `occurred_at`."""
    return datetime.now(UTC)


# How long the checks wait for a cluster that is still settling after a fault (a node woken
# from SIGSTOP steps down and catches up; its API answers can time out meanwhile).
_SETTLE_S = 60.0


async def replay(cluster: Cluster, prefix: str) -> Replayed:
    """Every stream folded from its first message, through a fresh connection; asked again
    while the cluster is still settling, so the check reads the history, not the recovery."""
    deadline = time.monotonic() + _SETTLE_S
    while True:
        nc = await cluster.connect()
        try:
            return await replay_all(nc.jetstream(timeout=10), Topology(prefix))
        except nats.errors.TimeoutError:
            if time.monotonic() >= deadline:
                raise
        finally:
            await nc.close()
        await asyncio.sleep(1.0)


async def check_everything(conv: Conversations, cluster: Cluster) -> Verdict:
    """After a fault: closings once, one effect per committed intent, nothing acknowledged
    lost, live projections equal to rebuilt ones on both surfaces."""
    stack = conv.stack
    for batch in conv.batches:
        await conv.closed_at(batch)
    state = await replay(cluster, stack.prefix)
    verdict = Verdict()
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=30) as provider:
        ledger = (await provider.get("/ledger")).json()["entries"]
    check_effects(verdict, state.operations, ledger, {})
    check_batches(verdict, state)
    check_acknowledged(verdict, state, conv.acked)
    for batch in conv.batches:
        if batch not in state.batches:
            verdict.fail("lost_ack", f"batch {batch}")
    nc = await cluster.connect()
    try:
        js = nc.jetstream(timeout=10)
        for client in conv.clients:
            await check_projections(
                verdict, state, conv.acked, http=client, js=js, topology=Topology(stack.prefix)
            )
    finally:
        await nc.close()
    # Only the batches these conversations opened: each closed exactly once, as delivered.
    for batch in conv.batches:
        finals = [
            d for d in state.deliveries.values() if d.batch_id == batch and d.kind == "final"
        ]
        if len(finals) != 1 or finals[0].status.value != "delivered":
            verdict.fail("closing", f"{batch}: {[(d.delivery_id, d.status) for d in finals]}")
    return verdict


async def replicas_current(cluster: Cluster, prefix: str, timeout_s: float = 60.0) -> None:
    """Every stream of the system has a leader and all three replicas current."""
    for context in Context:
        await cluster.stream_info(Topology(prefix).stream_name(context), timeout_s=timeout_s)


def elapsed(started: float) -> float:
    """Seconds since a monotonic instant."""
    return round(time.monotonic() - started, 2)


async def _poll(chat: Chat, path: str) -> httpx.Response | None:
    """One poll of a session's read route; None when the connection was closed under it.

    A pooled connection the server closed as idle (its keep-alive ran out while other polls
    waited out an election) can be reused by the next poll at that instant: poll again.
    """
    try:
        return await chat.client.get(path, headers=chat.auth)
    except httpx.RemoteProtocolError:
        return None
