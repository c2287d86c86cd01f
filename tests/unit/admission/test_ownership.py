"""`owned` values belong to a user by the user id as a whole segment, never as a prefix."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from demo.tools import DEMO_TOOLS
from libs.admission.rules import owns
from libs.tools import Caller

pytestmark = pytest.mark.fast

TRANSFER = next(t for t in DEMO_TOOLS if t.name == "transfer_money")
ANA = Caller(tenant_id="acme", user_id="ana", agent="main")
# What a user (session) id may hold: `^[A-Za-z0-9_.-]{1,64}$`.
USER_ID = st.from_regex(r"\A[A-Za-z0-9_.-]{1,64}\Z")


@pytest.mark.parametrize("value", ["ana", "ana:repo", "ana/repo", "main", "savings"])
def test_the_user_owns_the_id_its_segments_and_the_shared_values(value: str) -> None:
    assert owns(ANA, value, TRANSFER)


@pytest.mark.parametrize(
    "value", ["ana-bob-7", "ana-main", "ana.savings", "ana_x", "anabel", "ana:", "bob:repo", "an"]
)
def test_a_prefix_that_is_not_a_whole_segment_is_not_the_users(value: str) -> None:
    assert not owns(ANA, value, TRANSFER)


@given(USER_ID, USER_ID, st.text(min_size=1, max_size=10))
def test_no_user_owns_another_users_values(user: str, other: str, rest: str) -> None:
    # Whatever another user's id, a value under it is never this user's unless the ids match.
    value = f"{other}:{rest}"
    caller = Caller(tenant_id="t", user_id=user, agent="a")
    assert owns(caller, value, TRANSFER) == (user == other or value in TRANSFER.owned_values)
