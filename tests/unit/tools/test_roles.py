"""A tool's roles: the hook and the owned values come from its declaration."""

from __future__ import annotations

from typing import Annotated

import msgspec

from libs.admission import rules
from libs.tools import Caller, ToolDeclaration


class _Args(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    wallet: str
    sum_due: Annotated[int, msgspec.Meta(gt=0)]


def test_the_hook_and_owned_values_come_from_the_declaration() -> None:
    tool = ToolDeclaration(
        name="settle_up",
        description="x",
        arguments=_Args,
        executor="x",
        roles={"wallet": "owned", "sum_due": "amount"},
        owned_values=frozenset({"shared"}),
        authorise=lambda item, caller: "weekends only" if caller.agent == "weekday" else None,
    )
    ana = Caller("acme", "ana", "concierge")
    assert rules.authorise(tool, {"wallet": "shared", "sum_due": 1}, ana) == {
        "wallet": "shared",
        "sum_due": 1,
    }
    assert rules.authorise(tool, {"wallet": "ana", "sum_due": 1}, ana) == {
        "wallet": "ana",
        "sum_due": 1,
    }
    assert rules.authorise(tool, {"wallet": "bob", "sum_due": 1}, ana)[0] == "forbidden"
    weekday = Caller("acme", "ana", "weekday")
    assert rules.authorise(tool, {"wallet": "ana", "sum_due": 1}, weekday) == (
        "forbidden",
        "weekends only",
    )
    # An amount role is a positive amount even where the schema would allow less.
    assert rules.business_limits(tool, {"wallet": "ana", "sum_due": 0}, 0) is not None
