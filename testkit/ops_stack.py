"""The operation plane as real processes: sandbox provider + N workers + in-test admission."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from nats.aio.client import Client
from nats.js import JetStreamContext

from libs.admission import Admission, LoadView, ToolCall, TurnAdmission, TurnContext
from libs.bus import (
    Context,
    NatsEventStore,
    Topology,
    connect,
    ensure_buckets,
    ensure_streams,
    load_from,
)
from libs.config import BusSettings, ToolSettings
from libs.domain import OperationState, operation
from libs.events import (
    OPERATIONS,
    Envelope,
    OperationAttempted,
    OperationCommitted,
    OperationEvent,
)
from libs.tools import default_registry
from testkit.processes import ServiceProcess, free_port


@dataclass
class OpsStack:
    """Everything a scenario needs to drive and inspect the operation plane."""

    settings: BusSettings
    logs: Path
    worker_env: dict[str, str] = field(default_factory=dict)
    provider_env: dict[str, str] = field(default_factory=dict)
    workers: list[ServiceProcess] = field(default_factory=list)
    provider: ServiceProcess | None = None
    nc: Client | None = None
    js: JetStreamContext | None = None
    view: LoadView = field(default_factory=LoadView)
    admission: Admission | None = None
    callback_port: int = field(default_factory=free_port)
    # The in-test admission's tools (the workers get theirs from `worker_env`).
    tools: ToolSettings = field(default_factory=ToolSettings)

    @property
    def topology(self) -> Topology:
        """Names for this stack's prefix."""
        return Topology(self.settings.prefix)

    @property
    def provider_url(self) -> str:
        """Base URL of the sandbox provider."""
        assert self.provider is not None
        return self.provider.base_url

    def _base_env(self) -> dict[str, str]:
        return {
            "NATS_URL": self.settings.nats_url,
            "HOLDLINE_PREFIX": self.settings.prefix,
            "HOLDLINE_ACK_WAIT_S": "2",
            "HOLDLINE_MAX_DELIVER": "5",
            "HOLDLINE_REDELIVERY_BACKOFF_S": "0.1",
            "HOLDLINE_TOOL_MODULES": "testkit.tools_plugin",
        }

    async def start(self, workers: int = 2, *, provider: bool = True) -> None:
        """Start the provider, the workers, and an admission bound to this stack.

        `provider=False` leaves the sandbox out, for tools with a system of record of their own.
        """
        port = free_port()
        self.provider = ServiceProcess(
            "sandbox_provider",
            {
                "SANDBOX_PROVIDER_PORT": str(port),
                "SANDBOX_PROVIDER_DB": str(self.logs / "provider.sqlite3"),
                "HOLDLINE_CALLBACK_URL": f"http://127.0.0.1:{self.callback_port}/v1/callbacks/sandbox",
                "SANDBOX_ASYNC_DELAY_MS": "300",
                "SANDBOX_HANG_AFTER_COMMIT_S": "3",
                "SANDBOX_CALLBACK_BACKOFF_MS": "100",
                **self.provider_env,
            },
            port,
            self.logs / "provider.log",
        )
        self.nc = await connect(self.settings, name="test-admission")
        self.js = self.nc.jetstream()
        await ensure_streams(self.js, self.topology, self.settings)
        await ensure_buckets(self.js, self.topology, self.settings)
        # Start everything side by side: workers do not need the provider to become ready.
        await asyncio.gather(
            *([asyncio.to_thread(self.provider.start)] if provider else []),
            *(self.add_worker(callback=i == 0) for i in range(workers)),
        )
        await self.view.follow(self.js, self.topology)
        registry = default_registry(settings=self.tools)
        registry.load_modules(["testkit.tools_plugin"])
        registry.open_sources()
        self.admission = Admission(
            NatsEventStore(self.js, {}),
            self.topology,
            registry,
            self.view,
            await self.js.key_value(self.topology.bucket("intents")),
        )

    async def add_worker(
        self, *, callback: bool = False, env: dict[str, str] | None = None, wait: bool = True
    ) -> ServiceProcess:
        """Start one more worker process (the first one receives provider callbacks)."""
        port = self.callback_port if callback else free_port()
        worker = ServiceProcess(
            "operation_worker",
            {
                **self._base_env(),
                "OPERATION_WORKER_PORT": str(port),
                "HOLDLINE_WORKER_ID": f"w{len(self.workers)}",
                "SANDBOX_PROVIDER_URL": self.provider_url,
                "HOLDLINE_BACKOFF_SCALE": "0.05",
                "HOLDLINE_TIMEOUT_SCALE": "0.2",
                "HOLDLINE_CALLBACK_OVERDUE_S": "3",
                "HOLDLINE_POLL_INTERVAL_S": "0.05",
                **self.worker_env,
                **(env or {}),
            },
            port,
            self.logs / f"worker{len(self.workers)}.log",
        )
        self.workers.append(worker)
        await asyncio.to_thread(worker.start, wait_ready=wait)
        return worker

    async def stop(self) -> None:
        """Stop every process and close the connection."""
        for proc in [*self.workers, self.provider]:
            if proc is not None:
                await asyncio.to_thread(proc.stop)
        await self.view.close()
        if self.nc is not None:
            await self.nc.close()

    def turn(
        self, session_id: str | None = None, *, user_id: str = "ana", tenant_id: str = "acme"
    ) -> TurnContext:
        """A fresh turn context."""
        return TurnContext(
            session_id=session_id or f"s_{uuid.uuid4().hex[:12]}",
            turn_id=f"t_{uuid.uuid4().hex[:12]}",
            tenant_id=tenant_id,
            user_id=user_id,
            agent="concierge",
        )

    async def admit(
        self, ctx: TurnContext, *calls: tuple[str, dict[str, Any]] | ToolCall
    ) -> TurnAdmission:
        """Admit calls given as (tool, arguments) pairs or ToolCall objects."""
        assert self.admission is not None
        tool_calls = [
            c if isinstance(c, ToolCall) else ToolCall(c[0], c[1], f"call_{uuid.uuid4().hex[:8]}")
            for c in calls
        ]
        return await self.admission.admit(ctx, tool_calls)

    async def operation(
        self, session_id: str, operation_id: str
    ) -> tuple[OperationState | None, list[Envelope[OperationEvent]]]:
        """An operation's state and events, read from the stream."""
        assert self.js is not None
        loaded = await load_from(
            NatsEventStore(self.js, {}),
            self.topology.stream_name(Context.OPERATIONS),
            self.topology.operation_subject(session_id, operation_id),
            OPERATIONS,
            operation.evolve,
        )
        return loaded.state, loaded.events

    async def wait_status(
        self, session_id: str, operation_id: str, *statuses: str, timeout_s: float = 20.0
    ) -> OperationState:
        """Poll until the operation reaches one of the statuses."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        state = None
        while asyncio.get_running_loop().time() < deadline:
            state, _ = await self.operation(session_id, operation_id)
            if state is not None and state.status.value in statuses:
                return state
            if state is not None and state.terminal:
                raise AssertionError(
                    f"{operation_id} ended {state.status.value} ({state.failure}), not {statuses}"
                )
            await asyncio.sleep(0.05)
        raise AssertionError(
            f"{operation_id} stuck in {state.status if state else None}, wanted {statuses}"
        )

    async def wait_async_pending(
        self, session_id: str, operation_id: str, timeout_s: float = 10.0
    ) -> None:
        """Poll until the provider accepted the operation (202) and its answer is awaited."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            state, _ = await self.operation(session_id, operation_id)
            if state is not None and state.awaiting_async:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{operation_id} never awaited an async answer")

    async def ledger(self, resource: str | None = None) -> list[dict[str, Any]]:
        """The provider's effect ledger (optionally for one resource)."""
        async with httpx.AsyncClient(base_url=self.provider_url) as client:
            entries: list[dict[str, Any]] = (await client.get("/ledger")).json()["entries"]
        return [e for e in entries if resource is None or e["resource"] == resource]

    async def effects(self, resource: str) -> int:
        """Real effects counted by the provider for one resource."""
        return sum(int(e["effects"]) for e in await self.ledger(resource))

    async def fault(self, **fault: Any) -> str:
        """Inject a provider fault at run time."""
        async with httpx.AsyncClient(base_url=self.provider_url) as client:
            response = await client.post("/admin/faults", json=fault)
            response.raise_for_status()
            return str(response.json()["fault_id"])


# What the operations tests' `make_stack` fixture hands out: start a stack of N workers.
StackFactory = Callable[..., Awaitable[OpsStack]]


def types(events: list[Envelope[OperationEvent]]) -> list[str]:
    """The dotted types of a list of events, in order."""
    return [str(e.event.__struct_config__.tag) for e in events]


@dataclass(frozen=True)
class Tried:
    """One attempt as the log records it: an `operation.attempted`, or the record a
    successful attempt's `operation.committed` carries."""

    attempt: int
    outcome: str
    http_status: int | None
    env: Envelope[OperationEvent]


def attempts(events: list[Envelope[OperationEvent]]) -> list[Tried]:
    """Every attempt recorded in an operation's events, in order."""
    found: list[Tried] = []
    for env in events:
        match env.event:
            case OperationAttempted(attempt=n, outcome=outcome, http_status=status):
                found.append(Tried(n, outcome, status, env))
            case OperationCommitted(attempt=record) if record is not None:
                found.append(Tried(record.attempt, "success", record.http_status, env))
    return found
