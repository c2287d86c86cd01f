"""operation-worker settings, from the environment.

- `OPERATION_WORKER_HOST` / `OPERATION_WORKER_PORT` (127.0.0.1:8091): HTTP (probes, callbacks)
  and `HOLDLINE_LOG_LEVEL` (INFO): how `libs.serve` runs it (`ServeSettings`)
- `OPERATION_WORKER_NICE` (10): added to the process's nice value, so the turn path runs first
- `HOLDLINE_WORKER_ID`: this worker's name in events (default: host-pid)
- `HOLDLINE_CALLBACK_SECRET`: HMAC key of sandbox callbacks (handed to its executor)
- `HOLDLINE_LEASE_TTL_S` (2): how long a silent (dead) worker keeps an operation
- `HOLDLINE_LEASE_RENEW_S` (0.5): how often a live worker renews the leases it holds
- `HOLDLINE_CALLBACK_OVERDUE_S` (5): after this, an awaited async result is polled
- `HOLDLINE_PROGRESS_AFTER_S` (10): an async wait this long gets one `operation.progress`
- `HOLDLINE_POLL_INTERVAL_S` (0.25): how often a waiting operation re-reads its state
- `HOLDLINE_RETRY_BUDGET_RATIO` (0.5), `HOLDLINE_RETRY_BUDGET_MIN` (20): retry budget
- `HOLDLINE_BACKOFF_SCALE` (1.0): multiplies every declared backoff (tests make it small)
- `HOLDLINE_TIMEOUT_SCALE` (1.0): multiplies every declared per-attempt timeout
- `HOLDLINE_MAX_IN_FLIGHT` (256): operations one worker handles at once
- `HOLDLINE_WORK_BATCH` (1): messages one worker's standing pull request on each of its two
  consumers (operation events it runs, work commands) may hold (how much of a burst it
  takes before its loop comes round again)
- `SANDBOX_PROVIDER_URL` (http://127.0.0.1:8090): the system of record of the demo tools
- `HOLDLINE_SANDBOX_CALLBACK_TWICE` (0): ask the sandbox to send every callback twice
- `HOLDLINE_TOOL_MODULES`, `HOLDLINE_TOOLS_FILE`: your tools (`ToolSettings`; in demo mode
  the demo's join them, `libs.modes`)
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from libs.config import (
    BACKGROUND_NICE,
    BusSettings,
    ServeSettings,
    ToolSettings,
    env_float,
    env_int,
    env_str,
)

SERVICE = "operation-worker"
ENV_PREFIX = "OPERATION_WORKER"
DEFAULT_PORT = 8091
# One work message per pull request: a worker takes the next only when its loop comes round,
# so a burst waits in the stream (costing nothing) rather than in a worker's hand, where each
# held operation renews its lease and heartbeats, and all of them interleave and finish late
# together. In `bench.ops`' burst (600 operations, two workers; `work_consumer_batch` in
# bench/results/design-changes.json) 1 against 64 gave twice the committed rate, started ->
# committed p99 0.2 s instead of 4.0 s, half the worker CPU and fewer broker messages per
# operation (19.5 / 16.9 sent / received -> 13.1 / 13.0). Where nothing waits (sequential
# turns) the request per message costs ~1 more message per operation. A broker many ms away
# caps a worker at one message per round trip; raise it there.
DEFAULT_WORK_BATCH = 1


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the worker reads from its environment."""

    bus: BusSettings
    serve: ServeSettings
    # This worker's name in events (default: host-pid).
    worker_id: str
    # How long a silent (dead) worker keeps an operation.
    lease_ttl_s: float
    # How often a live worker renews the leases it holds.
    lease_renew_s: float
    # After this, an awaited asynchronous result is polled.
    callback_overdue_s: float
    # An asynchronous wait this long gets one `operation.progress`.
    progress_after_s: float
    # How often a waiting operation re-reads its state.
    poll_interval_s: float
    # Retries allowed as a share of first attempts (the retry budget).
    retry_budget_ratio: float
    # Retries always allowed, whatever the ratio.
    retry_budget_min: int
    # Multiplies every declared backoff (tests make it small).
    backoff_scale: float
    # Multiplies every declared per-attempt timeout.
    timeout_scale: float
    # Operations one worker handles at once.
    max_in_flight: int
    # Messages the standing pull request on each of the worker's two consumers may hold: how much of
    # a burst it takes before its loop comes round again.
    work_batch: int
    tools: ToolSettings = field(default_factory=ToolSettings)

    def __post_init__(self) -> None:
        if self.work_batch < 1:
            raise ValueError(f"HOLDLINE_WORK_BATCH must be 1 or more, got {self.work_batch}")

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings."""
        bus = BusSettings.from_env()
        return cls(
            bus=bus,
            serve=ServeSettings.from_env(
                ENV_PREFIX, DEFAULT_PORT, bus, default_nice=BACKGROUND_NICE
            ),
            worker_id=env_str("HOLDLINE_WORKER_ID", f"{socket.gethostname()}-{os.getpid()}"),
            lease_ttl_s=env_float("HOLDLINE_LEASE_TTL_S", 2.0),
            lease_renew_s=env_float("HOLDLINE_LEASE_RENEW_S", 0.5),
            callback_overdue_s=env_float("HOLDLINE_CALLBACK_OVERDUE_S", 5.0),
            progress_after_s=env_float("HOLDLINE_PROGRESS_AFTER_S", 10.0),
            poll_interval_s=env_float("HOLDLINE_POLL_INTERVAL_S", 0.25),
            retry_budget_ratio=env_float("HOLDLINE_RETRY_BUDGET_RATIO", 0.5),
            retry_budget_min=env_int("HOLDLINE_RETRY_BUDGET_MIN", 20),
            backoff_scale=env_float("HOLDLINE_BACKOFF_SCALE", 1.0),
            timeout_scale=env_float("HOLDLINE_TIMEOUT_SCALE", 1.0),
            max_in_flight=env_int("HOLDLINE_MAX_IN_FLIGHT", 256),
            work_batch=env_int("HOLDLINE_WORK_BATCH", DEFAULT_WORK_BATCH),
            tools=ToolSettings.from_env(),
        )
