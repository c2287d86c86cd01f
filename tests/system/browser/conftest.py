"""A running system and a real headless Chromium pointed at its demo page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, on a prefix of its own."""
    with running_stack(broker.url, tmp_path_factory.mktemp("browser"), "b") as running:
        yield running


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium with a fresh profile (run scripts/ensure-system-deps.sh first)."""
    assert CHROMIUM.exists(), "chromium missing: run scripts/ensure-system-deps.sh"
    assert CHROMEDRIVER.exists(), "chromedriver missing: run scripts/ensure-system-deps.sh"
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--window-size=1440,1000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "profile", ignore_errors=True)
