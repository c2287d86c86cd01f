"""Test harness for the sandbox provider: the real provider as a subprocess, a tiny HTTP
server that receives its callbacks, and the environment both are started with."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from testkit.processes import ROOT, free_port

CALLBACK_SECRET = "provider-test-secret"
READY_TIMEOUT_S = 20.0


class ProviderProcess:
    """``python -m demo.sandbox_provider`` with its own port, database and log file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.port = int(env["SANDBOX_PROVIDER_PORT"])
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> ProviderProcess:
        assert self._proc is None, "already running"
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "demo.sandbox_provider"],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        with httpx.Client(base_url=self.base_url, timeout=1.0) as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._reap()
                    pytest.fail(f"provider exited during start-up:\n{self.log()}")
                try:
                    if client.get("/readyz").status_code == 200:
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
        self.kill()
        pytest.fail(f"provider not ready within {READY_TIMEOUT_S}s:\n{self.log()}")

    def client(self, timeout: float = 10.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, like a crashed pod."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        self._reap()

    def restart(self) -> ProviderProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _reap(self) -> None:
        if self._proc is not None:
            self._proc.wait(timeout=15)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass(frozen=True)
class ReceivedCallback:
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def payload(self) -> dict[str, Any]:
        value = json.loads(self.body)
        assert isinstance(value, dict)
        return value


class CallbackServer:
    """Records every POST; can answer 500 to the first N deliveries for a given key."""

    def __init__(self) -> None:
        self.received: list[ReceivedCallback] = []
        self.fail_first: dict[str, int] = {}
        self._cond = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    key = str(json.loads(body).get("key"))
                except (ValueError, AttributeError):
                    key = ""
                with server._cond:
                    failures = server.fail_first.get(key, 0)
                    if failures:
                        server.fail_first[key] = failures - 1
                    status = 500 if failures else 200
                    server.received.append(
                        ReceivedCallback(
                            {k.lower(): v for k, v in self.headers.items()}, body, status
                        )
                    )
                    server._cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep test output quiet

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1/callbacks/sandbox"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def start(self) -> CallbackServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def for_record(self, record_id: str) -> list[ReceivedCallback]:
        with self._cond:
            return [c for c in self.received if c.payload.get("record_id") == record_id]

    def wait_for(
        self, record_id: str, count: int = 1, timeout: float = 10.0
    ) -> list[ReceivedCallback]:
        """The first ``count`` callbacks for ``record_id`` (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [c for c in self.received if c.payload.get("record_id") == record_id]
                if len(found) >= count:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    pytest.fail(f"{len(found)}/{count} callbacks for {record_id} in {timeout}s")
                self._cond.wait(remaining)


def provider_env(db_path: Path, callback_url: str, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_", "HOLDLINE_"))}
    env.update(
        {
            "SANDBOX_PROVIDER_HOST": "127.0.0.1",
            "SANDBOX_PROVIDER_PORT": str(free_port()),
            "SANDBOX_PROVIDER_DB": str(db_path),
            "HOLDLINE_CALLBACK_URL": callback_url,
            "HOLDLINE_CALLBACK_SECRET": CALLBACK_SECRET,
            "SANDBOX_ASYNC_DELAY_MS": "300",
            "SANDBOX_HANG_AFTER_COMMIT_S": "2",
            "SANDBOX_CALLBACK_BACKOFF_MS": "100",
            "SANDBOX_SHUTDOWN_GRACE_S": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    env.update(overrides)
    return env
