"""The observed stack: every runtime service's /metrics, scraped."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from testkit.surface import SurfaceStack

# The services that serve libs.metrics (the sandbox provider has a registry of its own).
RUNTIME_SERVICES = (
    "interaction_surface",
    "operation_worker",
    "batch_coordinator",
    "delivery_policy",
)


def scrape(stack: SurfaceStack, service: str) -> str:
    """One service's /metrics text."""
    response = httpx.get(f"{stack.procs[service].base_url}/metrics", timeout=10.0)
    response.raise_for_status()
    return response.text


@dataclass
class ObservedStack:
    """A running stack and what every service exported before any traffic."""

    stack: SurfaceStack
    at_start: dict[str, str]
