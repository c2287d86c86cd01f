"""The sandbox provider over real HTTP: a subprocess on its own port and SQLite file."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from libs.signing import verify
from tests.component.provider.harness import CALLBACK_SECRET, CallbackServer, ProviderProcess

PROBLEM = "application/problem+json"


def uid() -> str:
    return uuid.uuid4().hex[:10]


def access(resource: str, **extra: Any) -> dict[str, Any]:
    return {"tenant_id": "acme", "user_id": "u-1", "resource": resource, **extra}


def booking(restaurant: str, **extra: Any) -> dict[str, Any]:
    return {
        "tenant_id": "acme",
        "user_id": "u-1",
        "restaurant": restaurant,
        "date": "2030-05-17",
        "time": "21:00",
        "party_size": 4,
        **extra,
    }


def transfer(to_account: str, **extra: Any) -> dict[str, Any]:
    return {
        "tenant_id": "acme",
        "user_id": "u-1",
        "from_account": "checking",
        "to_account": to_account,
        "amount_cents": 12_500,
        "currency": "EUR",
        **extra,
    }


def owner() -> dict[str, str]:
    return {"tenant_id": "acme", "user_id": "u-1"}


def effects(client: httpx.Client, kind: str, key: str) -> int:
    """Real effects counted under ``key`` (0 when the ledger has no entry)."""
    entries = client.get("/ledger", params={"kind": kind, "key": key}).json()["entries"]
    assert len(entries) <= 1
    return int(entries[0]["effects"]) if entries else 0


def lookup(client: httpx.Client, **params: str) -> dict[str, Any]:
    response = client.get("/v1/lookup", params=params)
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["type"].endswith("/" + slug)
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    return body


def post(
    client: httpx.Client, path: str, body: Any, key: str | None, **headers: str
) -> httpx.Response:
    sent = {k.replace("_", "-"): v for k, v in headers.items()}
    if key is not None:
        sent["Idempotency-Key"] = key
    return client.post(path, json=body, headers=sent)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("condition not reached in time")
        time.sleep(0.02)


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield pool


# ---------------------------------------------------------------------------- idempotency


def test_same_key_same_body_replays_stored_response_with_one_effect(client: httpx.Client) -> None:
    key, resource = f"k-{uid()}", f"door-{uid()}"
    first = post(client, "/v1/accesses", access(resource, reference="op-1"), key)
    assert first.status_code == 201
    record = first.json()
    assert record["kind"] == "access"
    assert record["status"] == "granted"
    assert record["resource"] == resource
    assert first.headers["location"] == f"/v1/records/{record['id']}"

    # Same fields in another order: the canonical body is the same request.
    reordered = {"reference": "op-1", "resource": resource, "user_id": "u-1", "tenant_id": "acme"}
    again = post(client, "/v1/accesses", reordered, key)
    assert again.status_code == 201
    assert again.json() == record
    assert again.headers["idempotent-replayed"] == "true"

    assert effects(client, "access", key) == 1
    assert client.get("/ledger", params={"key": key}).json()["entries"] == [
        {"key": key, "kind": "access", "resource": resource, "effects": 1}
    ]
    found = lookup(client, key=key)
    assert found["found"] is True
    assert [r["id"] for r in found["records"]] == [record["id"]]
    assert [r["id"] for r in lookup(client, reference="op-1")["records"]][-1] == record["id"]
    assert client.get(f"/v1/records/{record['id']}").json()["status"] == "granted"


def test_same_key_other_body_is_422_and_keys_are_scoped_per_kind(client: httpx.Client) -> None:
    key, resource = f"k-{uid()}", f"door-{uid()}"
    assert post(client, "/v1/accesses", access(resource), key).status_code == 201

    mismatch = post(client, "/v1/accesses", access(f"other-{uid()}"), key)
    assert_problem(mismatch, 422, "idempotency-mismatch")
    assert effects(client, "access", key) == 1
    records = lookup(client, key=key)["records"]
    assert [r["resource"] for r in records] == [resource]

    # The same key on another endpoint kind is another request.
    other_kind = post(client, "/v1/bookings", booking(f"resto-{uid()}"), key)
    assert other_kind.status_code == 201
    assert effects(client, "booking", key) == 1
    assert sorted(r["kind"] for r in lookup(client, key=key)["records"]) == ["access", "booking"]


def test_concurrent_same_key_gets_409_while_first_is_in_flight(
    client: httpx.Client, provider: ProviderProcess, background: ThreadPoolExecutor
) -> None:
    key, resource = f"k-{uid()}", f"slow-{uid()}"
    fault = client.post("/admin/faults", json={"match": resource, "latency_ms": 1000, "times": 1})
    assert fault.status_code == 201
    barrier = threading.Barrier(5)

    def send() -> httpx.Response:
        with provider.client() as own:
            barrier.wait()
            return post(own, "/v1/accesses", access(resource), key)

    responses = [f.result() for f in [background.submit(send) for _ in range(5)]]
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [201, 409, 409, 409, 409]
    for conflict in (r for r in responses if r.status_code == 409):
        assert_problem(conflict, 409, "idempotency-in-flight")
        assert conflict.headers["retry-after"] == "1"

    assert effects(client, "access", key) == 1
    assert len(lookup(client, key=key)["records"]) == 1
    # Only the request that ran consumed the fault.
    faults = client.get("/admin/faults").json()["faults"]
    assert [(f["hits"], f["times"]) for f in faults] == [(1, 0)]
    replay = post(client, "/v1/accesses", access(resource), key)
    assert replay.status_code == 201
    assert replay.json()["id"] == next(r for r in responses if r.status_code == 201).json()["id"]


# ---------------------------------------------------------------------------- faults


def test_admin_fault_status_times_then_success_counts_one_effect(client: httpx.Client) -> None:
    prefix = f"vip{uid()}"
    resource, key = f"{prefix}-door", f"k-{uid()}"
    created = client.post(
        "/admin/faults",
        json={"match": f"{prefix}-*", "status": 503, "times": 2, "retry_after_s": 1.5},
    )
    assert created.status_code == 201
    fault_id = created.json()["fault_id"]

    for _ in range(2):
        failed = post(client, "/v1/accesses", access(resource), key)
        assert_problem(failed, 503, "injected-fault")
        assert failed.headers["retry-after"] == "2"  # whole seconds, rounded up
        assert effects(client, "access", key) == 0
        assert lookup(client, key=key) == {"found": False, "records": [], "in_flight": False}

    # A resource that does not match the glob is untouched.
    bystander = f"k-{uid()}"
    assert post(client, "/v1/accesses", access(f"plain-{uid()}"), bystander).status_code == 201

    listed = client.get("/admin/faults").json()["faults"]
    assert [(f["fault_id"], f["times"], f["hits"], f["active"]) for f in listed] == [
        (fault_id, 0, 2, False)
    ]
    success = post(client, "/v1/accesses", access(resource), key)
    assert success.status_code == 201
    assert post(client, "/v1/accesses", access(resource), key).json() == success.json()
    assert effects(client, "access", key) == 1
    assert effects(client, "access", bystander) == 1


def test_admin_fault_latency_is_applied_before_commit(
    client: httpx.Client, provider: ProviderProcess, background: ThreadPoolExecutor
) -> None:
    key, resource = f"k-{uid()}", f"lag-{uid()}"
    client.post("/admin/faults", json={"match": "lag-*", "latency_ms": 800, "times": 1})

    def send() -> tuple[float, httpx.Response]:
        with provider.client() as own:
            started = time.monotonic()
            response = post(own, "/v1/accesses", access(resource), key)
            return time.monotonic() - started, response

    pending = background.submit(send)
    wait_until(lambda: lookup(client, key=key)["in_flight"])
    # While the latency runs nothing is committed yet.
    assert lookup(client, key=key)["found"] is False
    assert effects(client, "access", key) == 0

    elapsed, response = pending.result()
    assert response.status_code == 201
    assert elapsed >= 0.8
    assert effects(client, "access", key) == 1
    assert lookup(client, key=key)["in_flight"] is False

    started = time.monotonic()
    assert post(client, "/v1/accesses", access(f"lag-{uid()}"), f"k-{uid()}").status_code == 201
    assert time.monotonic() - started < 0.5  # times=1 is used up


def test_header_faults_status_retry_after_and_latency(client: httpx.Client) -> None:
    key, resource = f"k-{uid()}", f"hdr-{uid()}"
    limited = post(
        client,
        "/v1/transfers",
        transfer(resource),
        key,
        X_Sandbox_Fault_Status="429",
        X_Sandbox_Fault_Retry_After="3",
    )
    assert_problem(limited, 429, "injected-fault")
    assert limited.headers["retry-after"] == "3"
    assert effects(client, "transfer", key) == 0

    broken = post(client, "/v1/transfers", transfer(resource), key, X_Sandbox_Fault_Status="500")
    assert_problem(broken, 500, "injected-fault")
    assert "retry-after" not in broken.headers
    assert lookup(client, key=key)["found"] is False

    started = time.monotonic()
    slow = post(client, "/v1/transfers", transfer(resource), key, X_Sandbox_Fault_Latency_Ms="400")
    assert slow.status_code == 201
    assert time.monotonic() - started >= 0.4
    assert slow.json()["status"] == "completed"
    assert effects(client, "transfer", key) == 1

    bad = post(client, "/v1/accesses", access(resource), f"k-{uid()}", X_Sandbox_Fault_Status="x")
    assert_problem(bad, 400, "invalid-fault-header")


def test_business_error_is_final_stored_and_has_no_effect(client: httpx.Client) -> None:
    key, resource = f"k-{uid()}", f"acct-{uid()}"
    refused = post(
        client,
        "/v1/transfers",
        transfer(resource),
        key,
        X_Sandbox_Business_Error="insufficient_funds",
    )
    body = assert_problem(refused, 400, "business-error")
    assert body["code"] == "insufficient_funds"
    assert effects(client, "transfer", key) == 0
    assert lookup(client, key=key)["found"] is False

    # The refusal is the request's answer: a retry gets it again, still without effect.
    retry = post(client, "/v1/transfers", transfer(resource), key)
    assert retry.status_code == 400
    assert retry.json() == body
    assert retry.headers["idempotent-replayed"] == "true"
    assert effects(client, "transfer", key) == 0


@pytest.mark.parametrize("via", ["admin", "header"])
def test_timeout_after_commit_then_retry_gets_stored_result(
    client: httpx.Client, provider: ProviderProcess, via: str
) -> None:
    key, restaurant = f"k-{uid()}", f"hang-{uid()}"
    headers: dict[str, str] = {"Idempotency-Key": key}
    if via == "admin":
        client.post(
            "/admin/faults", json={"match": restaurant, "timeout_after_commit": True, "times": 1}
        )
    else:
        headers["X-Sandbox-Fault-Timeout-After-Commit"] = "1"

    with provider.client(timeout=0.5) as impatient, pytest.raises(httpx.ReadTimeout):
        impatient.post("/v1/bookings", json=booking(restaurant), headers=headers)

    # The answer was lost but the effect is real: reconciliation finds it.
    found = lookup(client, key=key)
    assert found["found"] is True
    assert [r["status"] for r in found["records"]] == ["confirmed"]
    assert effects(client, "booking", key) == 1

    retry = post(client, "/v1/bookings", booking(restaurant), key)
    assert retry.status_code == 201
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["id"] == found["records"][0]["id"]
    assert effects(client, "booking", key) == 1


# ---------------------------------------------------------------------------- transfers


def test_transfers_ignore_idempotency_mode_makes_one_effect_per_send(
    spawn: Callable[..., ProviderProcess],
) -> None:
    proc = spawn(SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY="1")
    key, reference, to_account = f"k-{uid()}", f"op-{uid()}", f"savings-{uid()}"
    with proc.client() as client:
        first = post(client, "/v1/transfers", transfer(to_account, reference=reference), key)
        second = post(client, "/v1/transfers", transfer(to_account, reference=reference), key)
        assert first.status_code == second.status_code == 201
        assert first.json()["id"] != second.json()["id"]
        assert "idempotent-replayed" not in second.headers
        assert client.get("/ledger", params={"kind": "transfer"}).json()["entries"] == [
            {"key": key, "kind": "transfer", "resource": to_account, "effects": 2}
        ]
        by_reference = lookup(client, reference=reference)
        assert by_reference["found"] is True
        assert [r["id"] for r in by_reference["records"]] == [
            first.json()["id"],
            second.json()["id"],
        ]
        assert all(r["status"] == "completed" for r in by_reference["records"])

        # Without a key the ledger counts under the reference.
        keyless = f"op-{uid()}"
        assert (
            post(client, "/v1/transfers", transfer(to_account, reference=keyless), None).status_code
            == 201
        )
        assert effects(client, "transfer", keyless) == 1

        # Only transfers ignore keys in this mode.
        access_key = f"k-{uid()}"
        post(client, "/v1/accesses", access("gate"), access_key)
        assert post(client, "/v1/accesses", access("gate"), access_key).status_code == 201
        assert effects(client, "access", access_key) == 1


def test_transfers_honour_keys_unless_the_request_asks_to_ignore_them(
    client: httpx.Client,
) -> None:
    key, to_account = f"k-{uid()}", f"acct-{uid()}"
    post(client, "/v1/transfers", transfer(to_account), key)
    assert post(client, "/v1/transfers", transfer(to_account), key).status_code == 201
    assert effects(client, "transfer", key) == 1

    missing = post(client, "/v1/transfers", transfer(to_account), None)
    assert_problem(missing, 400, "missing-idempotency-key")

    reference = f"op-{uid()}"
    for _ in range(2):
        sent = post(
            client,
            "/v1/transfers",
            transfer(to_account, reference=reference),
            None,
            X_Sandbox_Ignore_Idempotency="1",
        )
        assert sent.status_code == 201
    assert effects(client, "transfer", reference) == 2
    assert len(lookup(client, reference=reference, kind="transfer")["records"]) == 2


# ---------------------------------------------------------------------------- async completion


def test_async_completion_sends_a_signed_callback(
    client: httpx.Client, callback_server: CallbackServer
) -> None:
    key, restaurant, reference = f"k-{uid()}", f"resto-{uid()}", f"op-{uid()}"
    accepted = post(
        client, "/v1/bookings", booking(restaurant, reference=reference), key, X_Sandbox_Async="1"
    )
    assert accepted.status_code == 202
    record_id = accepted.json()["id"]
    assert accepted.json()["status"] == "pending"
    assert client.get(f"/v1/records/{record_id}").json()["status"] == "pending"
    assert effects(client, "booking", key) == 0

    (callback,) = callback_server.wait_for(record_id)
    assert callback.answered == 200
    assert verify(
        CALLBACK_SECRET.encode(),
        callback.headers["x-holdline-timestamp"],
        callback.headers["x-holdline-signature"],
        callback.body,
        now=time.time(),
    )
    assert not verify(
        CALLBACK_SECRET.encode(),
        callback.headers["x-holdline-timestamp"],
        callback.headers["x-holdline-signature"],
        callback.body + b" ",
        now=time.time(),
    )
    payload = callback.payload
    assert payload["callback_id"]
    assert payload["record_id"] == record_id
    assert payload["kind"] == "booking"
    assert payload["key"] == key
    assert payload["reference"] == reference
    assert payload["status"] == "confirmed"
    assert payload["resource"] == restaurant
    assert payload["record"]["status"] == "confirmed"

    assert client.get(f"/v1/records/{record_id}").json()["status"] == "confirmed"
    assert effects(client, "booking", key) == 1
    replay = post(
        client, "/v1/bookings", booking(restaurant, reference=reference), key, X_Sandbox_Async="1"
    )
    assert (replay.status_code, replay.json()["id"]) == (202, record_id)
    assert effects(client, "booking", key) == 1


def test_callback_twice_carries_the_same_callback_id(
    client: httpx.Client, callback_server: CallbackServer
) -> None:
    key = f"k-{uid()}"
    accepted = post(
        client,
        "/v1/accesses",
        access(f"door-{uid()}"),
        key,
        X_Sandbox_Async="1",
        X_Sandbox_Callback_Twice="1",
    )
    assert accepted.status_code == 202
    first, second = callback_server.wait_for(accepted.json()["id"], count=2)
    assert first.payload["callback_id"] == second.payload["callback_id"]
    assert first.body == second.body
    assert first.payload["status"] == second.payload["status"] == "granted"
    assert effects(client, "access", key) == 1


def test_failed_callback_is_retried_until_delivered(
    client: httpx.Client, callback_server: CallbackServer
) -> None:
    key = f"k-{uid()}"
    callback_server.fail_first[key] = 2
    accepted = post(client, "/v1/accesses", access(f"door-{uid()}"), key, X_Sandbox_Async="1")
    deliveries = callback_server.wait_for(accepted.json()["id"], count=3)
    assert [d.answered for d in deliveries] == [500, 500, 200]
    assert len({d.payload["callback_id"] for d in deliveries}) == 1
    assert effects(client, "access", key) == 1


def test_cancel_pending_booking_before_commit_has_no_effect(
    client: httpx.Client, callback_server: CallbackServer
) -> None:
    key, restaurant = f"k-{uid()}", f"resto-{uid()}"
    accepted = post(client, "/v1/bookings", booking(restaurant), key, X_Sandbox_Async="1")
    record_id = accepted.json()["id"]

    cancelled = post(client, f"/v1/bookings/{record_id}/cancel", owner(), f"c-{uid()}")
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["committed"] is False

    (callback,) = callback_server.wait_for(record_id)
    assert callback.payload["status"] == "cancelled"
    # The cancelled booking's completion still fires at its due time and must find nothing
    # to commit. A booking held after it is due later, and completions run one at a time in
    # due order on the provider's loop: once the later one committed, the first was decided.
    later = post(client, "/v1/bookings", booking(f"resto-{uid()}"), f"k-{uid()}",
                 X_Sandbox_Async="1")
    (done,) = callback_server.wait_for(later.json()["id"])
    assert done.payload["status"] == "confirmed", done.payload
    record = client.get(f"/v1/records/{record_id}").json()
    assert (record["status"], record["committed_at"]) == ("cancelled", None)
    assert effects(client, "booking", key) == 0
    assert [c.payload["status"] for c in callback_server.for_record(record_id)] == ["cancelled"]


# ---------------------------------------------------------------------------- compensation


def test_access_revoke_is_idempotent_and_keeps_history(client: httpx.Client) -> None:
    key, resource = f"k-{uid()}", f"door-{uid()}"
    record_id = post(client, "/v1/accesses", access(resource), key).json()["id"]

    revoke_key = f"r-{uid()}"
    revoked = post(client, f"/v1/accesses/{record_id}/revoke", owner(), revoke_key)
    assert revoked.status_code == 200
    assert revoked.json()["status"] == "revoked"
    assert revoked.json()["committed"] is True
    assert revoked.json()["compensated_at"]

    replay = post(client, f"/v1/accesses/{record_id}/revoke", owner(), revoke_key)
    assert replay.json() == revoked.json()
    assert replay.headers["idempotent-replayed"] == "true"
    twice = post(client, f"/v1/accesses/{record_id}/revoke", owner(), f"r-{uid()}")
    assert twice.status_code == 200
    assert twice.json()["compensated_at"] == revoked.json()["compensated_at"]

    assert client.get(f"/v1/records/{record_id}").json()["status"] == "revoked"
    assert effects(client, "access", key) == 1  # compensation never erases the effect

    stranger = {"tenant_id": "other", "user_id": "u-1"}
    assert_problem(
        post(client, f"/v1/accesses/{record_id}/revoke", stranger, f"r-{uid()}"), 404, "not-found"
    )
    assert_problem(
        post(client, "/v1/accesses/acc_nope/revoke", owner(), f"r-{uid()}"), 404, "not-found"
    )
    assert_problem(
        post(client, f"/v1/accesses/{record_id}/revoke", owner(), None),
        400,
        "missing-idempotency-key",
    )


def test_booking_cancel_after_commit_and_transfers_cannot_be_cancelled(
    client: httpx.Client,
) -> None:
    key = f"k-{uid()}"
    record_id = post(client, "/v1/bookings", booking(f"resto-{uid()}"), key).json()["id"]
    cancelled = post(client, f"/v1/bookings/{record_id}/cancel", owner(), f"c-{uid()}")
    assert (cancelled.status_code, cancelled.json()["status"]) == (200, "cancelled")
    assert cancelled.json()["committed"] is True
    assert effects(client, "booking", key) == 1

    # A booking id on the access route is not an access.
    assert_problem(
        post(client, f"/v1/accesses/{record_id}/revoke", owner(), f"r-{uid()}"), 404, "not-found"
    )

    transfer_key = f"k-{uid()}"
    transfer_id = post(client, "/v1/transfers", transfer(f"acct-{uid()}"), transfer_key).json()[
        "id"
    ]
    refused = post(client, f"/v1/transfers/{transfer_id}/cancel", owner(), f"c-{uid()}")
    assert refused.status_code in (404, 405)
    assert refused.headers["content-type"].startswith(PROBLEM)
    assert client.get(f"/v1/records/{transfer_id}").json()["status"] == "completed"
    assert effects(client, "transfer", transfer_key) == 1


# ---------------------------------------------------------------------------- durability


def test_state_survives_sigkill_and_restart(
    spawn: Callable[..., ProviderProcess],
    callback_server: CallbackServer,
    background: ThreadPoolExecutor,
) -> None:
    # Long enough that the async booking is still pending when the kill lands, even when a
    # loaded machine slows the steps in between.
    proc = spawn(SANDBOX_ASYNC_DELAY_MS="4000")
    done_key, pending_key, torn_key = f"k-{uid()}", f"k-{uid()}", f"k-{uid()}"
    with proc.client() as client:
        done = post(client, "/v1/accesses", access("vault"), done_key)
        assert done.status_code == 201
        pending = post(client, "/v1/bookings", booking("bistro"), pending_key, X_Sandbox_Async="1")
        assert pending.status_code == 202
        ledger_before = client.get("/ledger").json()

        def torn() -> None:
            # Killed mid-latency: the claim dies with the process, nothing is committed.
            with proc.client() as own, pytest.raises(httpx.TransportError):
                post(
                    own,
                    "/v1/accesses",
                    access("annex"),
                    torn_key,
                    X_Sandbox_Fault_Latency_Ms="5000",
                )

        torn_request = background.submit(torn)
        wait_until(lambda: lookup(client, key=torn_key)["in_flight"])

    proc.kill()
    torn_request.result()
    proc.start()

    with proc.client() as client:
        assert client.get("/ledger").json() == ledger_before
        replay = post(client, "/v1/accesses", access("vault"), done_key)
        assert replay.status_code == 201
        assert replay.json() == done.json()
        assert replay.headers["idempotent-replayed"] == "true"
        assert effects(client, "access", done_key) == 1

        # The async booking accepted before the crash still commits, once.
        record_id = pending.json()["id"]
        (callback,) = callback_server.wait_for(record_id, timeout=20)
        assert callback.payload["status"] == "confirmed"
        assert client.get(f"/v1/records/{record_id}").json()["status"] == "confirmed"
        assert effects(client, "booking", pending_key) == 1

        # The request killed before commit left no effect and no stuck key.
        assert lookup(client, key=torn_key) == {"found": False, "records": [], "in_flight": False}
        assert post(client, "/v1/accesses", access("annex"), torn_key).status_code == 201
        assert effects(client, "access", torn_key) == 1


# ---------------------------------------------------------------------------- bad input


def test_bad_input_is_problem_json_and_changes_nothing(client: httpx.Client) -> None:
    before = client.get("/ledger").json()
    k = f"k-{uid()}"
    headers = {"Idempotency-Key": k, "Content-Type": "application/json"}

    assert_problem(
        client.post("/v1/accesses", content=b"{nope", headers=headers), 400, "malformed-json"
    )
    assert_problem(client.post("/v1/accesses", content=b"", headers=headers), 400, "malformed-json")
    assert_problem(
        client.post("/v1/accesses", json=["door"], headers=headers), 422, "validation-error"
    )
    assert_problem(
        client.post("/v1/accesses", json={"tenant_id": "acme"}, headers=headers),
        422,
        "validation-error",
    )
    assert_problem(
        client.post("/v1/accesses", json={**access("ok"), "resource": 7}, headers=headers),
        422,
        "validation-error",
    )
    assert_problem(
        client.post("/v1/accesses", json=access("Bad Name"), headers=headers),
        400,
        "invalid-resource",
    )
    assert_problem(
        client.post("/v1/accesses", json=access("ok", tenant_id="a b"), headers=headers),
        422,
        "validation-error",
    )
    wrong_types = [
        booking("resto", party_size="4"),
        booking("resto", date="2030-02-30"),
        booking("resto", time="25:00"),
        transfer("acct", amount_cents=0),
        transfer("acct", amount_cents=True),
        transfer("acct", amount_cents=10.5),
        transfer("acct", currency="euro"),
    ]
    for body in wrong_types:
        path = "/v1/bookings" if "restaurant" in body else "/v1/transfers"
        assert_problem(client.post(path, json=body, headers=headers), 422, "validation-error")
    assert_problem(
        client.post("/v1/transfers", json=transfer("Savings"), headers=headers),
        400,
        "invalid-resource",
    )
    assert_problem(client.post("/v1/accesses", json=access("ok")), 400, "missing-idempotency-key")

    oversized = access("ok", reference="x" * 150, padding="y" * 70_000)
    assert_problem(
        client.post("/v1/accesses", json=oversized, headers=headers), 413, "body-too-large"
    )
    chunks = iter([b'{"padding": "', b"z" * 70_000, b'"}'])
    assert_problem(
        client.post("/v1/accesses", content=chunks, headers=headers), 413, "body-too-large"
    )

    assert_problem(client.get("/v1/lookup"), 422, "validation-error")
    assert_problem(client.get("/v1/records/acc_missing"), 404, "not-found")
    assert_problem(client.get("/v1/nothing-here"), 404, "not-found")
    assert_problem(client.post("/admin/faults", json={"status": 503}), 422, "validation-error")
    assert_problem(
        client.post("/admin/faults", json={"match": "*", "status": 200}), 422, "validation-error"
    )

    assert client.get("/ledger").json() == before
    assert lookup(client, key=k) == {"found": False, "records": [], "in_flight": False}
    assert client.get("/admin/faults").json() == {"faults": []}


# ---------------------------------------------------------------------------- reads and ops


def test_a_fault_for_a_restaurant_s_reads_fails_and_delays_them(client: httpx.Client) -> None:
    restaurant = f"slow-{uid()}"
    params = {"restaurant": restaurant, "date": "2030-05-17"}
    # A fault of the restaurant's bookings leaves its reads alone.
    booking_fault = {"match": restaurant, "status": 503, "times": 1}
    bookings = client.post("/admin/faults", json=booking_fault)
    assert bookings.status_code == 201
    assert client.get("/v1/availability", params=params).status_code == 200
    added = client.post("/admin/faults", json={**booking_fault, "reads": True})
    assert added.status_code == 201
    failed = assert_problem(client.get("/v1/availability", params=params), 503, "injected-fault")
    assert "nothing was committed" in failed["detail"]
    assert client.get("/v1/availability", params=params).status_code == 200
    slow = client.post(
        "/admin/faults", json={"match": restaurant, "latency_ms": 300, "times": 1, "reads": True}
    )
    assert slow.status_code == 201
    assert client.get("/v1/availability", params=params).status_code == 200
    # Each rule was consumed by exactly one read.
    rules = {f["fault_id"]: f for f in client.get("/admin/faults").json()["faults"]}
    for rule in (added.json(), slow.json()):
        assert (rules[rule["fault_id"]]["hits"], rules[rule["fault_id"]]["times"]) == (1, 0)
    assert rules[bookings.json()["fault_id"]]["hits"] == 0
    client.delete("/admin/faults")


def test_availability_is_deterministic_and_read_only(client: httpx.Client) -> None:
    before = client.get("/ledger").json()
    params = {"restaurant": "luigi", "date": "2030-05-17"}
    first = client.get("/v1/availability", params=params)
    assert first.status_code == 200
    assert client.get("/v1/availability", params=params).json() == first.json()
    slots = first.json()["slots"]
    assert slots
    assert all(len(s) == 5 and s[2] == ":" for s in slots)
    other_day = client.get("/v1/availability", params={**params, "date": "2030-05-18"}).json()
    assert other_day["date"] == "2030-05-18"
    assert_problem(
        client.get("/v1/availability", params={**params, "restaurant": "Luigi"}),
        400,
        "invalid-resource",
    )
    assert client.get("/ledger").json() == before


def metric(text: str, line_prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(line_prefix + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_health_ready_and_metrics_reflect_effects(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
    effect_line = 'holdline_sandbox_effects_total{kind="booking"}'
    created_line = 'holdline_sandbox_requests_total{kind="booking",outcome="created"}'
    text = client.get("/metrics").text
    assert "# TYPE holdline_sandbox_effects_total counter" in text
    assert 'holdline_sandbox_effects_total{kind="transfer"}' in text
    effects_before, created_before = metric(text, effect_line), metric(text, created_line)

    key = f"k-{uid()}"
    post(client, "/v1/bookings", booking(f"resto-{uid()}"), key)
    post(client, "/v1/bookings", booking(f"resto-{uid()}"), key)  # mismatch: no effect
    text = client.get("/metrics").text
    assert metric(text, effect_line) == effects_before + 1
    assert metric(text, created_line) == created_before + 1
    assert metric(text, 'holdline_sandbox_requests_total{kind="booking",outcome="mismatch"}') >= 1
    assert effects(client, "booking", key) == 1
