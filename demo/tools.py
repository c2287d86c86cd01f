"""The four demo tools and their compensations, declared like any user's tools."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

import msgspec

from demo import speech
from libs.tools.declaration import BusinessLimits, Limits, ToolDeclaration
from libs.tools.registry import ToolRegistry

from .sandbox import CALLBACK_ROUTE, ROUTES, SandboxExecutor

Resource = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
Day = Annotated[str, msgspec.Meta(pattern=r"^\d{4}-\d{2}-\d{2}$")]
Clock = Annotated[str, msgspec.Meta(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]
Account = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class ProvisionAccessArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Grant the user access to each named resource."""

    accesses: Annotated[list[Resource], msgspec.Meta(min_length=1, max_length=20)]


class AccessItem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One access of a provision_access batch."""

    access: Resource


class RevokeAccessArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Revoke an access granted earlier (compensation)."""

    access_id: str
    access: Resource


class BookTableArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Book a table at a restaurant."""

    restaurant: Resource
    date: Day
    time: Clock
    party_size: Annotated[int, msgspec.Meta(ge=1, le=20)] = 2


class CancelBookingArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Cancel a confirmed booking (compensation)."""

    booking_id: str
    restaurant: Resource


class TransferMoneyArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Move money from one of the user's accounts to another account."""

    to_account: Account
    amount_cents: Annotated[int, msgspec.Meta(gt=0)]
    currency: Annotated[str, msgspec.Meta(pattern=r"^[A-Z]{3}$")] = "EUR"
    from_account: Account = "main"


class CheckAvailabilityArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Read which times a restaurant has free on a date."""

    restaurant: Resource
    date: Day


def _booking_label(arguments: Mapping[str, Any]) -> str:
    """ "casa-pepe 2026-12-24 21:00" (a booking), "casa-pepe 2026-12-24" (availability)."""
    parts = (arguments.get(k) for k in ("restaurant", "date", "time"))
    return " ".join(str(p) for p in parts if p)


def _transfer_label(arguments: Mapping[str, Any]) -> str:
    """ "50.00 EUR to bob-main" (without a destination: no label of its own)."""
    if not arguments.get("to_account"):
        return ""
    amount = arguments.get("amount_cents")
    money = f"{amount / 100:.2f} {arguments.get('currency', '')}" if isinstance(amount, int) else ""
    return f"{money.strip()} to {arguments['to_account']}".strip()


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


DEMO_TOOLS: tuple[ToolDeclaration, ...] = (
    ToolDeclaration(
        name="provision_access",
        description="Grant the user access to one or more tools or workspaces.",
        arguments=AccessItem,
        executor="sandbox.access",
        batch_field="accesses",
        item_field="access",
        roles={"access": "resource"},
        idempotent=True,
        compensating_tool="revoke_access",
        compensation_arguments=lambda args, result: {
            "access_id": str(result.get("id", "")),
            "access": args["access"],
        },
        owner="session",
        duplicate_policy="allow",
        limits=Limits(per_user_open=16),
        overflow="queue",
    ),
    ToolDeclaration(
        name="revoke_access",
        description="Revoke an access granted earlier.",
        arguments=RevokeAccessArgs,
        executor="sandbox.revoke_access",
        # Compensations are admitted from a committed operation; the role words their label.
        roles={"access": "resource"},
        idempotent=True,
        internal=True,
    ),
    ToolDeclaration(
        name="book_table",
        description="Book a table at a restaurant for a date, time and party size.",
        arguments=BookTableArgs,
        executor="sandbox.booking",
        roles={"restaurant": "resource"},
        label=_booking_label,
        idempotent=True,
        cancellable=True,
        compensating_tool="cancel_booking",
        compensation_arguments=lambda args, result: {
            "booking_id": str(result.get("id", "")),
            "restaurant": args["restaurant"],
        },
        subject_key_fields=("restaurant", "date"),
        owner="session",
        duplicate_policy="replace",
        deadline_s=300.0,
    ),
    ToolDeclaration(
        name="cancel_booking",
        description="Cancel a confirmed booking.",
        arguments=CancelBookingArgs,
        executor="sandbox.cancel_booking",
        roles={"restaurant": "resource"},
        idempotent=True,
        internal=True,
    ),
    ToolDeclaration(
        name="transfer_money",
        description="Transfer money to another account. Irreversible; needs the user's yes.",
        arguments=TransferMoneyArgs,
        executor="sandbox.transfer",
        roles={"from_account": "owned", "to_account": "text", "amount_cents": "amount"},
        owned_values=frozenset({"main", "savings"}),
        normalisers={"currency": _upper},
        label=_transfer_label,
        idempotent=False,
        needs_confirmation=True,
        owner="session",
        priority="urgent",
        duplicate_policy="confirm",
        max_attempts=3,
        business=BusinessLimits(max_amount=500_000, max_per_user_per_hour=5),
        limits=Limits(per_user_open=4),
        overflow="reject",
    ),
    ToolDeclaration(
        name="check_availability",
        description="Check which times a restaurant has free on a date.",
        arguments=CheckAvailabilityArgs,
        executor="sandbox.availability",
        roles={"restaurant": "resource"},
        label=_booking_label,
        idempotent=True,
        read_only=True,
        owner="agent",
        duplicate_policy="allow",
        overflow="coalesce",
        attempt_timeout_s=2.0,
        deadline_s=20.0,
    ),
)


def register(registry: ToolRegistry) -> None:
    """Declare the demo tools and, in the worker (a client is given), their sandbox
    executors, whose callbacks arrive on one route (`/v1/callbacks/sandbox`)."""
    for declaration in DEMO_TOOLS:
        registry.declare(replace(declaration, speech=speech.hints(declaration.name)))
    if registry.client is None:
        return
    settings = registry.settings
    for name, route in ROUTES.items():
        executor = SandboxExecutor(
            route, registry.client,
            callback_twice=settings.callback_twice, callback_secret=settings.callback_secret,
        )
        registry.register_executor(name, executor, callback_route=CALLBACK_ROUTE)
