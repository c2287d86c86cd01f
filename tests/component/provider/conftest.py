"""Fixtures local to the sandbox provider tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.component.provider.harness import CallbackServer, ProviderProcess, provider_env


@pytest.fixture(scope="module")
def callback_server() -> Iterator[CallbackServer]:
    server = CallbackServer().start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def provider(
    callback_server: CallbackServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProviderProcess]:
    """One provider shared by the tests of a module; tests keep apart by unique keys."""
    home = tmp_path_factory.mktemp("provider")
    proc = ProviderProcess(
        provider_env(home / "db" / "sandbox.sqlite3", callback_server.url), home / "log"
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def client(provider: ProviderProcess) -> Iterator[httpx.Client]:
    with provider.client() as http:
        http.delete("/admin/faults").raise_for_status()
        yield http
        http.delete("/admin/faults").raise_for_status()


@pytest.fixture
def spawn(
    callback_server: CallbackServer, tmp_path: Path
) -> Iterator[Callable[..., ProviderProcess]]:
    """Start a dedicated provider with env overrides; stopped at teardown."""
    started: list[ProviderProcess] = []

    def make(**overrides: str) -> ProviderProcess:
        index = len(started)
        env = provider_env(
            tmp_path / f"db{index}" / "sandbox.sqlite3", callback_server.url, **overrides
        )
        proc = ProviderProcess(env, tmp_path / f"provider{index}.log")
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.stop()
