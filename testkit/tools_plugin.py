"""Tools a user might register from their own package (loaded via HOLDLINE_TOOL_MODULES).

They reuse the sandbox executors with declarations tuned for timing-sensitive tests.
"""

from __future__ import annotations

from demo.tools import AccessItem, CheckAvailabilityArgs
from libs.tools import Limits, ToolDeclaration, ToolRegistry


def register(registry: ToolRegistry) -> None:
    """Declare the test tools."""
    registry.declare(
        ToolDeclaration(
            name="flaky_access",
            description="An access grant with a short deadline and many attempts allowed.",
            arguments=AccessItem,
            executor="sandbox.access",
            roles={"access": "resource"},
            max_attempts=100,
            backoff_base_s=0.05,
            backoff_max_s=0.2,
            deadline_s=1.5,
        )
    )
    registry.declare(
        ToolDeclaration(
            name="capped_access",
            description="At most three open per user; more are rejected.",
            arguments=AccessItem,
            executor="sandbox.access",
            roles={"access": "resource"},
            limits=Limits(per_user_open=3),
            overflow="reject",
        )
    )
    registry.declare(
        ToolDeclaration(
            name="queued_access",
            description="One runs at a time; up to four wait admitted.",
            arguments=AccessItem,
            executor="sandbox.access",
            roles={"access": "resource"},
            limits=Limits(per_user_open=2, running=1),
            overflow="queue",
        )
    )
    registry.declare(
        ToolDeclaration(
            name="lenient_access",
            description="Many attempts and a long deadline: only the retry budget stops it.",
            arguments=AccessItem,
            executor="sandbox.access",
            roles={"access": "resource"},
            max_attempts=50,
            backoff_base_s=0.01,
            backoff_max_s=0.02,
            deadline_s=60.0,
        )
    )
    for name, overflow in (("busy_availability", "coalesce"), ("cheap_availability", "degrade")):
        registry.declare(
            ToolDeclaration(
                name=name,
                description="Availability with room for one open read per tenant.",
                arguments=CheckAvailabilityArgs,
                executor="sandbox.availability",
                roles={"restaurant": "resource"},
                read_only=True,
                limits=Limits(per_tenant_open=1),
                overflow=overflow,  # type: ignore[arg-type]
            )
        )
