"""The whole system as real processes on one broker, driven over the surface's HTTP API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect

from testkit.processes import ServiceProcess, free_port

T = TypeVar("T")

COMMON_ENV = {
    # The tests run the demo (its tools, sandbox provider and mock model) unless a test
    # says otherwise: explicit, because tools files and modules alone would mean production.
    "HOLDLINE_DEMO": "1",
    "HOLDLINE_ACK_WAIT_S": "2",
    "HOLDLINE_MAX_DELIVER": "5",
    "HOLDLINE_REDELIVERY_BACKOFF_S": "0.1",
    "HOLDLINE_GRACEFUL_SHUTDOWN_S": "1",
    "HOLDLINE_LOG_LEVEL": "INFO",
    "HOLDLINE_MIN_QUIET_MS": "300",
    "HOLDLINE_DELIVERY_WINDOW_MS": "2500",
    "HOLDLINE_LANGUAGE": "en",
}


@dataclass
class SurfaceStack:
    """Provider, worker, coordinator, policy and surface, each its own process."""

    nats_url: str
    prefix: str
    logs: Path
    env: dict[str, str] = field(default_factory=dict)
    surface_env: dict[str, str] = field(default_factory=dict)
    # A second surface process on the same streams (another model), when given.
    second_surface_env: dict[str, str] | None = None
    # More processes started with the others: name -> (service package, env over the
    # package's own), e.g. a second worker or partition 1 of the coordinator.
    extra: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)
    procs: dict[str, ServiceProcess] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The surface's base URL."""
        return self.procs["interaction_surface"].base_url

    @property
    def second_url(self) -> str:
        """The second surface's base URL."""
        return self.procs["second_surface"].base_url

    @property
    def provider_url(self) -> str:
        """The sandbox provider's base URL."""
        return self.procs["sandbox_provider"].base_url

    def start(self) -> None:
        """Start every process side by side, then wait until each is ready."""
        base = {**COMMON_ENV, "NATS_URL": self.nats_url, "HOLDLINE_PREFIX": self.prefix, **self.env}
        ports = {name: free_port() for name in (
            "sandbox_provider", "operation_worker", "batch_coordinator", "delivery_policy",
            "interaction_surface",
        )}
        provider = f"http://127.0.0.1:{ports['sandbox_provider']}"
        extra: dict[str, dict[str, str]] = {
            "sandbox_provider": {
                "SANDBOX_PROVIDER_DB": str(self.logs / "provider.sqlite3"),
                "HOLDLINE_CALLBACK_URL": (
                    f"http://127.0.0.1:{ports['operation_worker']}/v1/callbacks/sandbox"
                ),
                "SANDBOX_ASYNC_DELAY_MS": "300",
                "SANDBOX_HANG_AFTER_COMMIT_S": "2",
                "SANDBOX_CALLBACK_BACKOFF_MS": "100",
            },
            "operation_worker": {
                "SANDBOX_PROVIDER_URL": provider,
                "HOLDLINE_BACKOFF_SCALE": "0.1",
                "HOLDLINE_TIMEOUT_SCALE": "0.2",
                "HOLDLINE_CALLBACK_OVERDUE_S": "3",
                "HOLDLINE_POLL_INTERVAL_S": "0.05",
            },
            "interaction_surface": {"SANDBOX_PROVIDER_URL": provider, **self.surface_env},
        }
        for name, port in ports.items():
            env = {**base, f"{name.upper()}_PORT": str(port), **extra.get(name, {})}
            self.procs[name] = ServiceProcess(name, env, port, self.logs / f"{name}.log")
        if self.second_surface_env is not None:
            port = free_port()
            env = {
                **base,
                "INTERACTION_SURFACE_PORT": str(port),
                "SANDBOX_PROVIDER_URL": provider,
                **self.second_surface_env,
            }
            self.procs["second_surface"] = ServiceProcess(
                "interaction_surface", env, port, self.logs / "second_surface.log"
            )
        for name, (package, overrides) in self.extra.items():
            port = free_port()
            env = {
                **self.procs[package].env,
                f"{package.upper()}_PORT": str(port),
                **overrides,
            }
            self.procs[name] = ServiceProcess(package, env, port, self.logs / f"{name}.log")
        for proc in self.procs.values():
            proc.start(wait_ready=False)
        for proc in self.procs.values():
            proc.wait_ready(60)

    def stop(self) -> None:
        """Kill everything (graceful shutdown is not what these tests check)."""
        for proc in self.procs.values():
            proc.kill9()



@contextlib.contextmanager
def running_stack(nats_url: str, logs: Path, tag: str, **options: Any) -> Iterator[SurfaceStack]:
    """A SurfaceStack on a fresh prefix (`tag` + random hex), started, and stopped on exit."""
    running = SurfaceStack(
        nats_url=nats_url, prefix=f"{tag}{uuid.uuid4().hex[:10]}", logs=logs, **options
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()

@dataclass
class Chat:
    """One chat session seen through the public API."""

    client: httpx.AsyncClient
    session_id: str
    token: str
    agent: str

    @property
    def auth(self) -> dict[str, str]:
        """The bearer header."""
        return {"Authorization": f"Bearer {self.token}"}

    async def say(self, text: str, **extra: Any) -> dict[str, Any]:
        """One turn; asserts 200."""
        response = await self.client.post(
            f"/v1/sessions/{self.session_id}/turns", json={"text": text, **extra}, headers=self.auth
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def snapshot(self) -> dict[str, Any]:
        """The session snapshot."""
        response = await self.client.get(f"/v1/sessions/{self.session_id}", headers=self.auth)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def timeline(self) -> list[dict[str, Any]]:
        """The session timeline."""
        response = await self.client.get(
            f"/v1/sessions/{self.session_id}/timeline", headers=self.auth
        )
        assert response.status_code == 200, response.text
        events: list[dict[str, Any]] = response.json()["events"]
        return events

    async def typing(self, typing: bool) -> None:
        """The typing indicator."""
        response = await self.client.post(
            f"/v1/sessions/{self.session_id}/activity", json={"typing": typing}, headers=self.auth
        )
        assert response.status_code == 202, response.text

    async def handoff(self, agent: str, **extra: Any) -> dict[str, Any]:
        """Hand the session to another agent."""
        response = await self.client.post(
            f"/v1/sessions/{self.session_id}/handoff", json={"agent": agent, **extra},
            headers=self.auth,
        )
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def stream_url(self, after: str | None = None) -> str:
        """The WebSocket URL, optionally resuming after a cursor."""
        base = str(self.client.base_url).replace("http://", "ws://").rstrip("/")
        url = f"{base}/v1/sessions/{self.session_id}/stream?token={self.token}"
        return f"{url}&after={after}" if after else url

    async def stream(self, after: str | None = None) -> ClientConnection:
        """Open the WebSocket stream."""
        return await connect(self.stream_url(after))


async def open_chat(
    client: httpx.AsyncClient, *, user: str | None = None, agent: str | None = None
) -> Chat:
    """Create a session over the API."""
    body: dict[str, Any] = {"user_id": user or f"u-{uuid.uuid4().hex[:8]}", "tenant_id": "acme"}
    if agent:
        body["agent"] = agent
    response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 201, response.text
    data = response.json()
    return Chat(client, data["session_id"], data["token"], data["agent"])


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout_s: float = 15.0, every_s: float = 0.1
) -> T:
    """Poll until the probe returns something truthy."""
    deadline = time.monotonic() + timeout_s
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(every_s)
    raise AssertionError(f"condition not met within {timeout_s}s (last: {last!r})")


async def frames_until(
    ws: ClientConnection, stop: Callable[[dict[str, Any]], bool], timeout_s: float = 15.0
) -> list[dict[str, Any]]:
    """Read frames until one satisfies `stop` (included)."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no matching frame in {timeout_s}s; got {len(frames)} frames")
        frame = json.loads(await asyncio.wait_for(ws.recv(), remaining))
        frames.append(frame)
        if stop(frame):
            return frames


async def fault(stack: SurfaceStack, **body: Any) -> None:
    """Inject a provider fault (through the surface's demo proxy, as the page does)."""
    async with httpx.AsyncClient(base_url=stack.url) as http:
        response = await http.post("/v1/demo/faults", json=body)
        assert response.status_code == 201, response.text


async def effects(stack: SurfaceStack, resource: str) -> int:
    """Real effects the provider's ledger counts for a resource."""
    async with httpx.AsyncClient(base_url=stack.provider_url) as http:
        entries = (await http.get("/ledger")).json()["entries"]
    return sum(int(e["effects"]) for e in entries if e["resource"] == resource)


def unique(name: str) -> str:
    """A resource name no other test uses (faults match names globally)."""
    return f"{name}-{uuid.uuid4().hex[:6]}"


def closings(snapshot: dict[str, Any], batch_id: str) -> list[dict[str, Any]]:
    """Messages carrying the batch's closing delivery."""
    finals = {
        d["delivery_id"]
        for d in snapshot["deliveries"]
        if d["batch_id"] == batch_id and d["kind"] == "final"
    }
    return [m for m in snapshot["messages"] if m["delivery_id"] in finals]
