"""Request → acceptance latency of chat turns, with the mock model: floor, paced load, capacity.

`.venv/bin/python -m bench.acceptance` starts its own broker and every service on free
localhost ports and measures three things, each turn a batch ("give me access to a, b and
c", distinct names per turn, so three operations admitted):

- single: one session, sequential turns with a small gap; the unloaded floor.
- paced (open loop, `bench.load.paced`): N sessions, each sending a turn every P seconds
  with ±jitter, like a person. The latency of a turn runs from its *scheduled* send time, so
  a turn held back by its session's previous one still counts the wait (no coordinated
  omission).
- closed loop (`runs`): N sessions sending turns back to back; it saturates the machine and
  shows capacity (turns/s), its latency is mostly queueing.

The latency is the client's HTTP round trip of `POST …/turns`. The surface runs with
`HOLDLINE_TURN_PHASES=1`: each run also reports where a turn's time went, from the
`holdline_turn_phase_seconds{phase}` histogram (mean per turn, scraped before and after),
and the CPU each process used. Results go to `bench/results/acceptance.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import resource
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.common import cpu_seconds, percentiles_ms
from bench.load import Pace, paced, running_stack, sequential, write_results

RESULTS = Path(__file__).parent / "results" / "acceptance.json"
_SAMPLE = re.compile(
    r"^holdline_(turn_phase_seconds|acceptance_seconds)_(sum|count)"
    r'(?:\{phase="([a-z_]+)"\})? (\S+)$'
)


async def _post(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    """POST, sent again if the connection drops (a keep-alive connection the server closed).

    Safe for turns: each carries a `client_turn_id`, so a repeat returns the first answer.
    """
    for attempt in range(3):
        try:
            return await client.post(path, json=body, headers=headers)
        except (httpx.ReadError, httpx.RemoteProtocolError, httpx.ConnectError):
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _Session:
    """One chat session of the load generator; each turn asks for `accesses` accesses."""

    def __init__(self, client: httpx.AsyncClient, accesses: int = 3) -> None:
        self._client = client
        self._accesses = accesses
        self.session_id = ""
        self._path = ""
        self._auth: dict[str, str] = {}
        self._tag = uuid.uuid4().hex[:5]
        self._sent = 0

    async def open(self) -> None:
        created = await _post(
            self._client, "/v1/sessions", {"user_id": f"b-{uuid.uuid4().hex[:8]}"}, {}
        )
        created.raise_for_status()
        body = created.json()
        self.session_id = str(body["session_id"])
        self._path = f"/v1/sessions/{self.session_id}/turns"
        self._auth = {"Authorization": f"Bearer {body['token']}"}

    async def turn(self) -> dict[str, Any]:
        """One turn (a batch of `accesses` operations); returns the surface's answer."""
        i, tag = self._sent, self._tag
        self._sent += 1
        names = [f"{chr(ord('a') + k)}{tag}{i}" for k in range(self._accesses)]
        listed = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
        response = await _post(
            self._client, self._path,
            {"text": f"give me access to {listed}", "client_turn_id": f"bench-{tag}-{i}"},
            self._auth,
        )
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        if len(answer["operations"]) != self._accesses:
            raise AssertionError(f"a batch turn admitted {answer['operations']}")
        return answer


async def _scrape(client: httpx.AsyncClient) -> dict[str, float]:
    """The surface's phase and acceptance sums and counts, keyed `<phase>.<sum|count>`."""
    response = await client.get("/metrics")
    response.raise_for_status()
    found: dict[str, float] = {}
    for line in response.text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            family, kind, phase, value = match.groups()
            name = phase or "turn_handled"
            if family == "acceptance_seconds" or phase:
                found[f"{name}.{kind}"] = float(value)
    return found


def _phases(before: dict[str, float], after: dict[str, float], turns: int) -> dict[str, Any]:
    """Per phase: how many times it ran per turn and its mean duration in ms."""
    out: dict[str, Any] = {}
    for key in sorted(after):
        name, kind = key.rsplit(".", 1)
        if kind != "count":
            continue
        count = after[key] - before.get(key, 0.0)
        if count <= 0:
            continue
        total = after[f"{name}.sum"] - before.get(f"{name}.sum", 0.0)
        out[name] = {
            "per_turn": round(count / max(turns, 1), 2),
            "mean_ms": round(total / count * 1000, 3),
        }
    return out


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of every process, this load generator included."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {
        **{name: cpu_seconds(pid) for name, pid in pids.items()},
        "load_generator": own.ru_utime + own.ru_stime,
    }


async def _measure(
    url: str, pids: dict[str, int], sessions: int, drive: Callable[[_Session, list[float]], Any],
) -> dict[str, Any]:
    """Open the sessions, warm up, run `drive` on each, and collect everything measured."""
    limits = httpx.Limits(max_connections=sessions + 1, max_keepalive_connections=sessions + 1)
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as client:
        opened = [_Session(client) for _ in range(sessions)]
        await asyncio.gather(*(s.open() for s in opened))
        # Warm-up: connections, code paths, the broker's first appends.
        await asyncio.gather(*(s.turn() for s in opened[:20]))
        before, cpu_before = await _scrape(client), _cpu(pids)
        latencies: list[float] = []
        started = time.perf_counter()
        await asyncio.gather(*(drive(s, latencies) for s in opened))
        elapsed = time.perf_counter() - started
        after, cpu_after = await _scrape(client), _cpu(pids)
    phases = _phases(before, after, len(latencies))
    measured = percentiles_ms(latencies)
    route = phases.get("route", {}).get("mean_ms")
    return {
        "sessions": sessions,
        "turns": len(latencies),
        "wall_s": round(elapsed, 3),
        "turns_per_s": round(len(latencies) / elapsed, 1),
        "acceptance": measured,
        "phases_ms": phases,
        # Client mean minus the route's: HTTP server and client, and waiting to be scheduled
        # before the route runs (and, paced, behind the session's previous turn).
        "outside_route_mean_ms": (
            round(measured["mean_ms"] - route, 3) if route is not None and latencies else None
        ),
        "cpu_ms_per_turn": {
            name: round((cpu_after[name] - cpu_before[name]) / max(len(latencies), 1) * 1000, 2)
            for name in cpu_after
        },
        "cpu_busy_share": {
            name: round((cpu_after[name] - cpu_before[name]) / elapsed, 3) for name in cpu_after
        },
    }


def main() -> None:
    """Start the stack, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, nargs="*", default=[50, 200],
                        help="closed-loop session counts")
    parser.add_argument("--turns", type=int, default=5, help="closed-loop turns per session")
    parser.add_argument("--paced-sessions", type=int, nargs="*", default=[50])
    parser.add_argument("--period", type=float, default=3.0, help="paced: seconds between turns")
    parser.add_argument("--jitter", type=float, default=0.3, help="paced: ± share of the period")
    parser.add_argument("--paced-turns", type=int, default=10, help="paced: turns per session")
    parser.add_argument("--single-turns", type=int, default=40, help="0 skips the floor run")
    parser.add_argument("--gap", type=float, default=0.1, help="single: seconds between turns")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - jitter of a load generator, not a secret
    with running_stack(
        env={"HOLDLINE_LOG_LEVEL": "WARNING"}, surface_env={"HOLDLINE_TURN_PHASES": "1"}
    ) as (stack, broker):
        pids = {name: p.proc.pid for name, p in stack.procs.items() if p.proc is not None}
        if broker.proc is not None:
            pids["nats_server"] = broker.proc.pid

        async def single_turns(s: _Session, out: list[float]) -> None:
            await sequential(s.turn, args.single_turns, out, gap_s=args.gap)

        single = (
            asyncio.run(_measure(stack.url, pids, 1, single_turns))
            if args.single_turns > 0 else None
        )
        paced_runs = [
            {
                **asyncio.run(_measure(
                    stack.url, pids, n,
                    lambda s, out: paced(
                        s.turn, Pace(args.paced_turns, args.period, args.jitter, rng), out
                    ),
                )),
                "period_s": args.period,
                "jitter": args.jitter,
            }
            for n in args.paced_sessions
        ]
        runs = [
            {
                **asyncio.run(_measure(
                    stack.url, pids, n, lambda s, out: sequential(s.turn, args.turns, out)
                )),
                "turns_per_session": args.turns,
            }
            for n in args.sessions
        ]
    write_results(
        RESULTS,
        "acceptance",
        "POST /v1/sessions/{id}/turns round trip (request → acceptance), mock model",
        {"single": single, "paced": paced_runs, "runs": runs},
        "p99 <= 20 ms at 50 sessions on a 2-core machine",
    )

if __name__ == "__main__":
    main()
