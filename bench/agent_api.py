"""The Agent API: tool-call request → response, and last commit → `delivery.say` received.

`.venv/bin/python -m bench.agent_api` starts its own broker and every service on free
localhost ports and drives them with `holdline.client` only, as an external agent would.
Each tool-call request is one `provision_access` of a fresh resource (one operation, one
batch), and every session keeps its agent WebSocket open and acknowledges each closing
`spoken`, so the closings really travel the whole path.

- single: one session, sequential requests with a small gap: the unloaded floor.
- paced (open loop): N sessions, each sending a request every P seconds ± jitter; latency
  counts from the *scheduled* send (no coordinated omission).
- closed loop: N sessions back to back, to show capacity.
- commit → say: for every closing received, from the `occurred_at` of the batch's last
  `operation.committed` (the worker's clock) to the moment the agent read the frame (same
  machine, same clock), read back from the session timelines after the run; and from its
  `delivery.sent` (the surface's own part: append, view, frame) to the same moment.

Each run also reports where a request's time went inside the surface (mean per phase of
`holdline_turn_phase_seconds`, the surface run with `HOLDLINE_TURN_PHASES=1`; `turn_handled`
is the whole request). Results go to `bench/results/agent_api.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.acceptance import _phases, _scrape
from bench.common import percentiles_ms
from bench.load import Pace, paced, running_stack, sequential, write_results
from holdline.client import AgentStream, HoldlineClient, SessionClient, ToolCall

RESULTS = Path(__file__).parent / "results" / "agent_api.json"


class Agent:
    """One session with its agent stream; records when each closing arrived."""

    def __init__(self, session: SessionClient) -> None:
        self.session = session
        self.stream: AgentStream | None = None
        self.received: dict[str, float] = {}
        self.expected = 0
        self._progress = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.stream = self.session.agent_stream()
        await self.stream.__aenter__()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.stream is not None
        async for say in self.stream:
            self.received[say.delivery_id] = time.time()
            self._progress.set()
            await self.stream.ack(say.delivery_id, "spoken")

    async def call(self) -> None:
        """One request (one operation, one batch, one closing expected)."""
        name = f"b{uuid.uuid4().hex[:12]}"
        await self.session.tool_calls(
            [ToolCall(tool_call_id=f"c-{name}", name="provision_access",
                      arguments={"accesses": [name]})]
        )
        self.expected += 1

    async def drained(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.received) < self.expected and time.monotonic() < deadline:
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), deadline - time.monotonic())

    async def stop(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
        if self.stream is not None:
            await self.stream.aclose()

    async def commit_to_say(self) -> tuple[list[float], list[float]]:
        """Seconds from each batch's last commit, and from its `delivery.sent` (the surface's
        own part), to the agent reading its closing."""
        timeline = (await self.session.timeline())["events"]
        sent: dict[str, float] = {}
        for event in timeline:
            if event["type"] == "delivery.sent" and event.get("delivery_id") in self.received:
                at = datetime.fromisoformat(event["occurred_at"]).timestamp()
                sent[event["delivery_id"]] = at
        pushes = [self.received[d] - at for d, at in sent.items()]
        last_commit: dict[str, float] = {}
        for event in timeline:
            if event["type"] == "operation.committed" and event.get("batch_id"):
                at = datetime.fromisoformat(event["occurred_at"]).timestamp()
                last_commit[event["batch_id"]] = max(last_commit.get(event["batch_id"], 0), at)
        gaps = []
        for event in timeline:
            if event["type"] == "delivery.ready" and event.get("delivery_id") in self.received:
                committed = last_commit.get(event.get("batch_id", ""))
                if committed is not None:
                    gaps.append(self.received[event["delivery_id"]] - committed)
        return gaps, pushes


async def _agents(hl: HoldlineClient, n: int) -> list[Agent]:
    agents = []
    for _ in range(n):
        session = await hl.create_session(user_id=f"b-{uuid.uuid4().hex[:8]}", tenant_id="acme")
        agent = Agent(session)
        await agent.start()
        agents.append(agent)
    return agents


async def _run(
    url: str, sessions: int, mode: str, calls: int, *, period: float = 0.0,
    jitter: float = 0.0, rng: random.Random | None = None,
) -> dict[str, Any]:
    rng = rng or random.Random(0)  # noqa: S311 - jitter of a load generator, not a secret
    async with HoldlineClient(url, timeout_s=60.0) as hl, httpx.AsyncClient(base_url=url) as raw:
        agents = await _agents(hl, sessions)
        latencies: list[float] = []
        before = await _scrape(raw)
        started = time.perf_counter()

        async def drive(agent: Agent) -> None:
            if mode == "paced":
                await paced(agent.call, Pace(calls, period, jitter, rng), latencies)
            else:
                gap_s = 0.1 if mode == "single" else 0.0
                await sequential(agent.call, calls, latencies, gap_s=gap_s)

        await asyncio.gather(*(drive(a) for a in agents))
        elapsed = time.perf_counter() - started
        # Where a request's time went inside the surface (HOLDLINE_TURN_PHASES=1).
        phases = _phases(before, await _scrape(raw), len(latencies))
        for agent in agents:
            await agent.drained(30.0)
        measured = [await agent.commit_to_say() for agent in agents]
        gaps = [g for found, _ in measured for g in found]
        pushes = [p for _, found in measured for p in found]
        received = sum(len(a.received) for a in agents)
        expected = sum(a.expected for a in agents)
        for agent in agents:
            await agent.stop()
    return {
        "sessions": sessions,
        "mode": mode,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 1),
        "tool_call": percentiles_ms(latencies),
        "commit_to_say": percentiles_ms(gaps),
        "sent_to_say": percentiles_ms(pushes),
        "closings_received": received,
        "closings_expected": expected,
        "surface_phases": phases,
        **({"period_s": period} if mode == "paced" else {}),
    }


def main() -> None:
    """Start the stack, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--single-calls", type=int, default=40)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--paced-calls", type=int, default=6, help="per session")
    parser.add_argument("--period", type=float, default=2.0)
    parser.add_argument("--jitter", type=float, default=0.3)
    parser.add_argument("--closed-calls", type=int, default=3, help="per session")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - jitter of a load generator, not a secret
    with running_stack(
        env={"HOLDLINE_LOG_LEVEL": "WARNING", "HOLDLINE_DELIVERY_WINDOW_MS": "30000"},
        surface_env={"HOLDLINE_RATE_SESSION": "1000/1000", "HOLDLINE_TURN_PHASES": "1"},
    ) as (stack, _broker):
        single = asyncio.run(_run(stack.url, 1, "single", args.single_calls))
        paced_run = asyncio.run(
            _run(stack.url, args.sessions, "paced", args.paced_calls, period=args.period,
                 jitter=args.jitter, rng=rng)
        )
        closed = asyncio.run(_run(stack.url, args.sessions, "closed", args.closed_calls))
    write_results(
        RESULTS,
        "agent_api",
        "POST /v1/sessions/{id}/tool-calls round trip with holdline.client (one operation "
        "per request), and last operation.committed → delivery.say read by the agent",
        {"single": single, "paced": paced_run, "closed": closed},
        "tool-call p99 <= 20 ms at 50 sessions on a 2-core machine",
    )

if __name__ == "__main__":
    main()
