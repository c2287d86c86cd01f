"""Seeds and replica counts: what NATS_URL accepts, and a stream that cannot get its replicas."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import httpx
import pytest
from nats.js import JetStreamContext

from testkit.processes import Broker, ServiceProcess, free_port
from testkit.surface import eventually


@pytest.mark.timeout(60)
async def test_a_stream_without_its_replicas_keeps_the_service_not_ready(
    broker: Broker, logs_dir: Path, prefix: str
) -> None:
    # One node cannot hold three replicas: the policy stays not ready and says why, while
    # its probes answer (start-up retries behind the HTTP server).
    port = free_port()
    proc = ServiceProcess(
        "delivery_policy",
        {
            "NATS_URL": f"{broker.url},nats://127.0.0.1:{free_port()}",
            "HOLDLINE_PREFIX": prefix,
            "HOLDLINE_STREAM_REPLICAS": "3",
            "DELIVERY_POLICY_PORT": str(port),
        },
        port,
        logs_dir / "policy.log",
    )
    proc.start(wait_ready=False)
    try:
        async with httpx.AsyncClient(base_url=proc.base_url, timeout=5) as http:

            async def refused() -> dict[str, object] | None:
                try:
                    response = await http.get("/readyz")
                except httpx.HTTPError:
                    return None
                body: dict[str, object] = response.json()
                return body if "replica" in str(body.get("detail")) else None

            body = await eventually(refused, timeout_s=40)
            assert (await http.get("/readyz")).status_code == 503
            assert "3 replica(s)" in str(body["detail"]), body
            assert (await http.get("/healthz")).status_code == 200
            # Every other route: 503 problem+json until started, with a retry hint.
            other = await http.get("/v1/anything")
            assert other.status_code == 503
            assert other.headers["content-type"] == "application/problem+json"
            assert other.headers["retry-after"] == "1"
        assert proc.proc is not None
        assert proc.proc.poll() is None  # waiting, not crashed
    finally:
        proc.kill9()


@pytest.mark.timeout(60)
async def test_the_operator_cli_takes_several_seeds(
    broker: Broker, js: JetStreamContext, prefix: str
) -> None:
    # The first seed is dead: the command connects through the second, reads, exits 0.
    env = {
        **os.environ,
        "NATS_URL": f"nats://127.0.0.1:{free_port()}, {broker.url}",
        "HOLDLINE_PREFIX": prefix,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "libs.cli", "rebuild", "operations", "--json",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out)["projection"] == "operations"
    # A seed list naming no broker is refused with a reason, before any connection.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "libs.cli", "rebuild", "operations",
        env={**env, "NATS_URL": " , "}, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 1
    assert "NATS_URL names no broker" in err.decode()
