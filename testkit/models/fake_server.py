"""What the two fake vendor servers share: a real HTTP server on 127.0.0.1, the requests it
received, a script queue, and the JSON error answer.

Each fake says only how its streamed answer is written (`ScriptedHandler.stream`).
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar


class Scripted(Protocol):
    """The part of a script the shared handler reads."""

    status: int
    error_body: str
    headers: dict[str, str]
    drop: bool


S = TypeVar("S", bound=Scripted)
F = TypeVar("F", bound="FakeServer[Any]")


class FakeServer(Generic[S]):
    """The server, its received requests and the script of its answers."""

    def __init__(self, script: S, handler: type[ScriptedHandler]) -> None:
        self.requests: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.script = script
        # Answers for the next requests, in order, before `script` answers the rest.
        self.queue: list[S] = []
        self._server = _QuietServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._server.fake = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def last_body(self) -> dict[str, Any]:
        body: dict[str, Any] = self.requests[-1]["body"]
        return body

    def next_script(self) -> S:
        return self.queue.pop(0) if self.queue else self.script

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that went away mid-answer is what some tests do on purpose


class ScriptedHandler(BaseHTTPRequestHandler, ABC):
    """Records the request, then answers its script: a drop, a JSON error, or `stream`."""

    # The one path this vendor serves; any other is dropped.
    path_served = ""

    def log_message(self, format: str, *args: Any) -> None:
        return

    @abstractmethod
    def stream(self, fake: Any, script: Any) -> None:
        """Write `script` as this vendor's streamed answer."""

    def do_POST(self) -> None:
        fake: FakeServer[Any] = self.server.fake  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        fake.times.append(time.monotonic())
        fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        script = fake.next_script()
        try:
            if script.drop or (self.path_served and self.path != self.path_served):
                self.close_connection = True
                return
            if script.status != 200:
                payload = script.error_body.encode()
                self.send_response(script.status)
                for name, value in script.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.stream(fake, script)
        except OSError:
            return  # the client went away (a cut or timeout test)


def running(fake: F) -> Iterator[F]:
    """Start the fake for a fixture and stop it afterwards."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
