"""Services reach a broker that demands TLS and a user/password, and only with both right."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.processes import ServiceProcess, free_port, nats_server_binary, wait_port

_PASSWORD = "s3cret-broker-pass"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _certificates(where: Path) -> None:
    # A throwaway CA, and a server certificate it signed for 127.0.0.1.
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=holdline test CA", "-keyout", "ca.key", "-out", "ca.pem", cwd=where)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=where)
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext", "-out", "server.pem",
             cwd=where)


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A nats-server of its own that requires TLS and a password; (url, certificate dir)."""
    where = tmp_path_factory.mktemp("tls")
    _certificates(where)
    port = free_port()
    config = where / "nats.conf"
    config.write_text(
        f"""
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{where / 'store'}" }}
tls {{
  cert_file: "{where / 'server.pem'}"
  key_file: "{where / 'server.key'}"
  timeout: 2
}}
authorization {{ user: holdline, password: "{_PASSWORD}" }}
"""
    )
    with (where / "nats.log").open("ab") as log:
        proc = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_port(port)
        yield f"tls://127.0.0.1:{port}", where
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _coordinator(url: str, where: Path, name: str, **env: str) -> ServiceProcess:
    port = free_port()
    return ServiceProcess(
        "batch_coordinator",
        {
            "NATS_URL": url,
            "HOLDLINE_PREFIX": "tls",
            "BATCH_COORDINATOR_PORT": str(port),
            "HOLDLINE_CONNECT_TIMEOUT_S": "1",
            **env,
        },
        port,
        where / f"{name}.log",
    )


async def _refused(proc: ServiceProcess, reason: str) -> str:
    proc.start(wait_ready=False)
    try:
        deadline = time.monotonic() + 30
        while reason not in proc.tail(200) and time.monotonic() < deadline:
            assert proc.proc is not None
            assert proc.proc.poll() is None, proc.tail()
            await asyncio.sleep(0.2)
        with pytest.raises((TimeoutError, RuntimeError)):
            proc.wait_ready(1.0)
        return proc.tail(200)
    finally:
        proc.kill9()


@pytest.mark.timeout(120)
async def test_a_service_is_ready_only_with_the_right_tls_and_credentials(
    secure_broker: tuple[str, Path],
) -> None:
    url, where = secure_broker
    good = {"NATS_USER": "holdline", "NATS_PASSWORD": _PASSWORD,
            "NATS_TLS_CA": str(where / "ca.pem")}
    right = _coordinator(url, where, "right", **good)
    await asyncio.to_thread(right.start, wait_ready=True, timeout_s=60)
    right.kill9()
    assert _PASSWORD not in right.tail(500)

    wrong_password = await _refused(
        _coordinator(url, where, "wrong-password", **{**good, "NATS_PASSWORD": "nope"}),
        "Authorization Violation",
    )
    assert f"batch-coordinator: cannot use the broker at {url}" in wrong_password
    assert _PASSWORD not in wrong_password
    # Without the CA, the server's certificate cannot be verified: no connection at all.
    untrusted = await _refused(
        _coordinator(url, where, "no-ca", **{**good, "NATS_TLS_CA": ""}),
        "CERTIFICATE_VERIFY_FAILED",
    )
    assert f"cannot use the broker at {url}" in untrusted
