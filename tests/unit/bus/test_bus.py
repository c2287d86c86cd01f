"""The bus without a broker: a refused expected sequence is a conflict; ack-subject positions."""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import NotJSMessageError
from nats.js.errors import APIError

from libs.bus import ConcurrencyConflict, position
from libs.bus.store import append
from libs.events import (
    OPERATIONS,
    OperationAdmitted,
)
from testkit.events import envelope


class _RefusingStream:
    """A JetStream stand-in whose publish answers a clustered leader's refusal."""

    def __init__(self, err_code: int) -> None:
        self.err_code = err_code
        self.calls = 0

    async def publish(self, *_: Any, **__: Any) -> Any:
        self.calls += 1
        raise APIError(code=400, err_code=self.err_code, description="wrong last sequence")


@pytest.mark.parametrize("err_code", [10071, 10164])
async def test_a_refused_expected_sequence_is_a_conflict_in_either_wording(err_code: int) -> None:
    # A clustered stream's leader answers 10164 (no sequence named): a lost race, to reload
    # and decide again, never a "store unavailable" (503) while the cluster is healthy.
    js = _RefusingStream(err_code)
    env = envelope(OperationAdmitted(tool="t", arguments={}, tenant_id="t", user_id="u"),
                   session_id="s1", operation_id="op1")
    with pytest.raises(ConcurrencyConflict):
        await append(js, OPERATIONS, "hl.operations.s1.op1", env,  # type: ignore[arg-type]
                     expected_last_subject_seq=3)
    assert js.calls == 1


def test_a_position_is_read_from_both_ack_subject_forms_and_nothing_else() -> None:
    v1 = "$JS.ACK.ORDERS.c1.2.41.7.1733472000123456789.5"
    v2 = "$JS.ACK.hub.ACCHASH.ORDERS.c1.2.41.7.1733472000123456789.5.r4nd"
    for reply in (v1, v2, v2.rsplit(".", 1)[0]):
        meta = Msg.Metadata._from_reply(reply)  # nats-py's own reading
        assert position(reply) == ("ORDERS", 41, 2, 5) == (
            meta.stream, meta.sequence.stream, meta.num_delivered, meta.num_pending
        )
    for other in (None, "", "_INBOX.abc", "$JS.ACK.ORDERS.c1.2", "$JS.NAK.a.b.1.2.3.4.5"):
        with pytest.raises(NotJSMessageError):
            position(other)
