"""The demo page's Talk button in real headless Chromium: a fake microphone (a WAV of espeak-ng
speech) says a request over WebRTC; it becomes operations, the agent's audio arrives in the
page, and the one closing is recorded spoken once the page returned its mark. A screenshot
of the page mid-call is written under the test's tmp_path."""

from __future__ import annotations

import asyncio
import json
import shutil
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from services.interaction_surface.voice.codec import WebRtcUp, silence_ulaw
from testkit.phone import speech
from testkit.surface import SurfaceStack, eventually
from testkit.voice import SPOKEN_REQUEST

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


def _microphone_file(path: Path, ulaw: bytes) -> Path:
    """What the fake microphone says: 48 kHz mono PCM16."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(48000)
        out.writeframes(WebRtcUp().convert(ulaw))
    return path


async def _what_is_said() -> bytes:
    """A second of quiet, the request, and a "yes" once the agent has had time to ask "did
    you say ...?" (the recognizer may doubt a name heard through the browser's audio
    processing; without the question, the yes is one more turn and admits nothing)."""
    request = await speech(SPOKEN_REQUEST, tail_silence_ms=10000)
    return silence_ulaw(1000) + request + await speech("yes", tail_silence_ms=20000)


@pytest.fixture
def microphone(tmp_path: Path) -> Path:
    """What the fake microphone says, played once."""
    return _microphone_file(tmp_path / "request.wav", asyncio.run(_what_is_said()))


@pytest.fixture
def browser(tmp_path: Path, microphone: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium whose microphone is the file, its permission granted."""
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
        "--autoplay-policy=no-user-gesture-required",
        "--use-fake-device-for-media-stream",
        "--use-fake-ui-for-media-stream",
        f"--use-file-for-fake-audio-capture={microphone}%noloop",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def _voice(driver: webdriver.Chrome) -> dict[str, Any]:
    found: dict[str, Any] = driver.execute_script(
        "const v = document.getElementById('voice');"
        "return {state: v.dataset.state, audio: Number(v.dataset.agentAudio || 0),"
        " lines: [...document.querySelectorAll('#voice-transcript li')].map(e => e.className)};"
    )
    return found


def test_talk_in_the_page_turns_speech_into_operations_and_plays_the_agent(
    stack: SurfaceStack, browser: webdriver.Chrome, tmp_path: Path
) -> None:
    wait = WebDriverWait(browser, 30)
    browser.get(stack.url)
    wait.until(lambda d: d.find_element(By.ID, "session-id").text.startswith("s_"))
    session = json.loads(
        browser.execute_script("return localStorage.getItem('holdline.session');")
    )
    browser.find_element(By.ID, "talk").click()
    wait.until(lambda d: _voice(d)["state"] == "connected")

    async def snapshot() -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
            answer = await http.get(
                f"/v1/sessions/{session['session_id']}",
                headers={"Authorization": f"Bearer {session['token']}"},
            )
        found: dict[str, Any] = answer.json()
        return found

    async def timeline() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
            answer = await http.get(
                f"/v1/sessions/{session['session_id']}/timeline",
                headers={"Authorization": f"Bearer {session['token']}"},
            )
        events: list[dict[str, Any]] = answer.json()["events"]
        return events

    async def operations() -> list[dict[str, Any]] | None:
        ops: list[dict[str, Any]] = (await snapshot())["operations"]
        return ops if len(ops) >= 2 else None

    async def spoken() -> list[dict[str, Any]]:
        return [d for d in (await snapshot())["deliveries"] if d["status"] == "spoken"]

    try:
        ops = asyncio.run(eventually(operations, timeout_s=40))
    except AssertionError:
        said = [(e["type"], e["data"].get("text")) for e in asyncio.run(timeline())]
        raise AssertionError(f"no operations; the timeline: {said}") from None
    assert {o["tool"] for o in ops} == {"provision_access"}
    # The agent's acceptance is played in the page (audio energy received on its track),
    # and its transcript shows both sides.
    WebDriverWait(browser, 30).until(lambda d: _voice(d)["audio"] > 0)
    WebDriverWait(browser, 30).until(lambda d: "assistant" in _voice(d)["lines"])
    assert "user" in _voice(browser)["lines"]
    assert browser.save_screenshot(str(tmp_path / "talk-mid-call.png"))
    # One closing, spoken: the page played it and returned its mark.
    assert len(asyncio.run(eventually(spoken, timeout_s=30))) == 1
    browser.find_element(By.ID, "talk").click()
    wait.until(lambda d: _voice(d)["state"] == "idle")
