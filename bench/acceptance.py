"""Request → acceptance latency of chat turns, with the mock model, at 50 and 200 sessions.

`.venv/bin/python -m bench.acceptance` starts its own broker and every service on free
localhost ports, opens N sessions, and has each send a bounded number of batch turns
("give me access to a, b and c", distinct names per turn) back to back; all sessions run
concurrently. The latency is the client's HTTP round trip of `POST …/turns`, i.e. what
a user waits for the acceptance. Results go to `bench/results/acceptance.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, percentiles_ms
from tests.support.processes import Broker
from tests.surface.stack import SurfaceStack

RESULTS = Path(__file__).parent / "results" / "acceptance.json"


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


async def _session(client: httpx.AsyncClient, turns: int, out: list[float]) -> None:
    created = await _post(client, "/v1/sessions", {"user_id": f"b-{uuid.uuid4().hex[:8]}"}, {})
    created.raise_for_status()
    body = created.json()
    auth = {"Authorization": f"Bearer {body['token']}"}
    for i in range(turns):
        tag = uuid.uuid4().hex[:5]
        text = f"give me access to a{tag}{i}, b{tag}{i} and c{tag}{i}"
        started = time.perf_counter()
        response = await _post(
            client,
            f"/v1/sessions/{body['session_id']}/turns",
            {"text": text, "client_turn_id": f"bench-{tag}-{i}"},
            auth,
        )
        out.append(time.perf_counter() - started)
        response.raise_for_status()


async def _run(url: str, sessions: int, turns: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=sessions, max_keepalive_connections=sessions)
    async with httpx.AsyncClient(base_url=url, timeout=30.0, limits=limits) as client:
        # Warm-up: connections, code paths, the broker's first appends.
        await asyncio.gather(*(_session(client, 1, []) for _ in range(min(sessions, 20))))
        latencies: list[float] = []
        started = time.perf_counter()
        await asyncio.gather(*(_session(client, turns, latencies) for _ in range(sessions)))
        elapsed = time.perf_counter() - started
    return {
        "sessions": sessions,
        "turns_per_session": turns,
        "turns": len(latencies),
        "wall_s": round(elapsed, 3),
        "turns_per_s": round(len(latencies) / elapsed, 1),
        "acceptance": percentiles_ms(latencies),
    }


def main() -> None:
    """Start the stack, measure, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--turns", type=int, default=5, help="turns per session (bounded)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="holdline-bench-") as tmp:
        root = Path(tmp)
        broker = Broker(store=root / "nats")
        broker.start()
        stack = SurfaceStack(
            nats_url=broker.url, prefix=f"bench{uuid.uuid4().hex[:6]}", logs=root,
            env={"HOLDLINE_LOG_LEVEL": "WARNING"},
        )
        try:
            stack.start()
            runs = [asyncio.run(_run(stack.url, n, args.turns)) for n in args.sessions]
        finally:
            stack.stop()
            broker.stop()
    result = {
        "benchmark": "acceptance",
        "what": "POST /v1/sessions/{id}/turns round trip (request → acceptance), mock model",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "runs": runs,
        "target": "p99 <= 20 ms at 50 sessions on a 2-core machine",
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
