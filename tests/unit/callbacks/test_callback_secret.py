"""No shared public callback key: the old default is refused, `holdline run` shares a
random one per run, and a worker off loopback refuses to start without one."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from demo.sandbox import CALLBACK_ROUTE
from libs import callback_secret
from libs.config import ToolSettings
from libs.service import StartingGate
from libs.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from libs.supervisor import Supervisor
from libs.tools import DeclarationError, default_registry, sandbox_client
from services.operation_worker import app as worker_app
from services.operation_worker.handlers import Worker
from services.operation_worker.settings import Settings
from testkit.tools_file import GOOD, tools_file

pytestmark = pytest.mark.fast

_OLD_PUBLIC_KEY = b"holdline-dev-callback-secret"


def test_a_callback_signed_with_the_old_public_key_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(callback_secret.ENV, raising=False)
    applied: list[object] = []

    async def spy(self: Worker, *args: object) -> str:
        applied.append(args)
        return "applied"

    monkeypatch.setattr(Worker, "complete_from_callback", spy)
    app = worker_app.create_app(Settings.from_env())
    for middleware in app.user_middleware:  # open the starting gate; no broker is needed here
        if middleware.cls is StartingGate:
            middleware.kwargs["runtime"].started.set()
    body = json.dumps({
        "callback_id": "cb1", "reference": "s1/op1",
        "record": {"status": "committed", "id": "r1"},
    }).encode()
    stamp = int(time.time())
    response = TestClient(app).post(
        "/v1/callbacks/sandbox",
        content=body,
        headers={
            TIMESTAMP_HEADER: str(stamp),
            SIGNATURE_HEADER: sign(_OLD_PUBLIC_KEY, stamp, body),
            "content-type": "application/json",
        },
    )
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert applied == []


def test_a_worker_off_loopback_refuses_to_start_without_the_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(callback_secret.ENV, raising=False)
    monkeypatch.setenv("OPERATION_WORKER_HOST", "0.0.0.0")
    with pytest.raises(DeclarationError, match=callback_secret.ENV):
        worker_app.create_app(Settings.from_env())


def test_holdline_run_gives_one_random_key_to_every_service(tmp_path: Path) -> None:
    keys = []
    for _ in range(2):
        supervisor = Supervisor(tmp_path, {"NATS_URL": "nats://127.0.0.1:4222", "PATH": ""})
        supervisor.plan()
        run_keys = {c.env.get(callback_secret.ENV) for c in supervisor.children}
        assert len(run_keys) == 1
        keys.append(run_keys.pop())
    assert None not in keys
    assert keys[0] != keys[1]
    assert _OLD_PUBLIC_KEY.decode() not in keys


def test_holdline_run_off_loopback_leaves_the_key_to_the_operator(tmp_path: Path) -> None:
    environ = {"NATS_URL": "nats://x:4222", "OPERATION_WORKER_HOST": "0.0.0.0"}
    supervisor = Supervisor(tmp_path, environ)
    supervisor.plan()
    assert all(callback_secret.ENV not in c.env for c in supervisor.children)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("10.0.0.5", False), ("worker.internal", False)],
)
def test_loopback(host: str, loopback: bool) -> None:
    assert callback_secret.is_loopback(host) is loopback


async def test_without_the_demo_there_is_no_sandbox_callback_route(tmp_path: Path) -> None:
    path = tools_file(tmp_path, GOOD)
    settings = ToolSettings(demo=False, callback_secret=b"k", tools_file=str(path))
    client = sandbox_client(settings)
    try:
        registry = default_registry(client, settings)
        assert registry.callback_receiver(CALLBACK_ROUTE) is None
        assert not registry.has("provision_access")
        assert [t.name for t in registry.tools()] == ["open_ticket"]
        demo = default_registry(client, ToolSettings(callback_secret=b"k"))
        assert demo.callback_receiver(CALLBACK_ROUTE) is not None
    finally:
        await client.aclose()
