"""A user's own tool package: `send_payout`, with its own executor and its own callback route.

Registered with `HOLDLINE_TOOL_MODULES=examples.payouts`. The tool's arguments are named
unlike any demo tool's; what admission enforces comes from the declared roles alone:
`account_id` must be the caller's own, `payee` may not be another tenant's, `amount` is
bounded by `max_amount`, `memo` is free text. The executor speaks the example help-desk
API (`examples.deskapi`): `X-Request-Token` idempotency, 202 + a signed webhook that the
worker receives at `POST /v1/callbacks/payouts`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from libs.tools import BusinessLimits, Limits, ToolDeclaration, ToolRegistry

from .executor import PayoutsExecutor

Name = Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
# `<user>:<name>` ("ana:checking"): ownership is by the user id as a whole segment.
AccountId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class PayoutArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Pay an amount from one of the user's accounts to a payee of the tenant."""

    account_id: AccountId
    payee: Name
    amount: Annotated[int, msgspec.Meta(gt=0, description="in cents")]
    memo: Annotated[str, msgspec.Meta(max_length=140)] = ""


DECLARATION = ToolDeclaration(
    name="send_payout",
    description="Pay an amount (in cents) from one of the user's accounts to a payee.",
    arguments=PayoutArgs,
    executor="payouts",
    roles={"account_id": "owned", "payee": "resource", "amount": "amount", "memo": "text"},
    idempotent=True,
    priority="urgent",
    duplicate_policy="reject",
    max_attempts=4,
    attempt_timeout_s=3.0,
    deadline_s=120.0,
    business=BusinessLimits(max_amount=100_000),
    limits=Limits(per_user_open=4),
    # A refused call keeps no arguments: the KeyError makes the label fall back to the name.
    label=lambda a: f"{a['amount'] / 100:.2f} to {a['payee']}",
    closing=lambda a, r: f"Payout {r['id']} of {a['amount'] / 100:.2f} to {a['payee']} is paid.",
)


def register(registry: ToolRegistry) -> None:
    """Called once at start-up by every holdline process that loads tool modules."""
    registry.declare(DECLARATION)
    registry.register_executor("payouts", PayoutsExecutor())
