"""Click through the live demo in real headless Chromium, against the running system."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import ElementClickInterceptedException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from testkit.drained import settled
from testkit.surface import SurfaceStack

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"


# Read through JavaScript in one go: the page re-renders panels, so element handles go stale.
def _texts(driver: webdriver.Chrome, css: str, attr: str = "textContent") -> list[str]:
    script = "return [...document.querySelectorAll(arguments[0])].map(e => e[arguments[1]]);"
    found: list[str] = driver.execute_script(script, css, attr)
    return found


def _count(driver: webdriver.Chrome, css: str) -> int:
    return len(_texts(driver, css))


def _statuses(driver: webdriver.Chrome) -> list[str]:
    script = "return [...document.querySelectorAll('.op')].map(e => e.dataset.status);"
    found: list[str] = driver.execute_script(script)
    return found


def _toggle(
    driver: webdriver.Chrome, wait: WebDriverWait[webdriver.Chrome], fault: str
) -> None:
    """Click a fault's switch as a visitor would: scrolled into view first, and again if a
    panel the page is re-rendering still covers it (the click is refused, never lost)."""
    css = f"label.toggle:has([data-fault='{fault}']) .switch"

    def clicked(d: webdriver.Chrome) -> bool:
        switch = d.find_element(By.CSS_SELECTOR, css)
        d.execute_script("arguments[0].scrollIntoView({block: 'center'});", switch)
        try:
            switch.click()
        except ElementClickInterceptedException:
            return False
        return True

    wait.until(clicked)


def _shown_to_the_end(
    driver: webdriver.Chrome, stack: SurfaceStack, wait: WebDriverWait[webdriver.Chrome]
) -> None:
    """Until the page has received every event its session will have: the services have
    handled everything on the bus, and the page's cursor reached the session's last event."""
    asyncio.run(settled(stack))
    session = driver.execute_script("return state.session;")
    response = httpx.get(
        f"{stack.url}/v1/sessions/{session['session_id']}",
        headers={"Authorization": f"Bearer {session['token']}"},
        timeout=10.0,
    )
    assert response.status_code == 200, response.text
    # The snapshot reads the streams up to their ends first: its cursor is the last one.
    last = response.json()["cursor"]
    wait.until(lambda d: d.execute_script("return state.cursor;") == last)


@pytest.mark.timeout(120)
def test_a_visitor_runs_a_batch_sees_one_closing_and_watches_a_retry(
    stack: SurfaceStack, browser: webdriver.Chrome
) -> None:
    wait = WebDriverWait(browser, 20, poll_frequency=0.05)
    browser.get(stack.url)
    wait.until(lambda d: d.find_element(By.ID, "conn-label").text == "live")
    assert browser.find_element(By.ID, "session-id").text.startswith("s_")

    # A batch request, typed like a visitor would (the typing indicator feeds /activity).
    box = browser.find_element(By.ID, "input")
    box.send_keys("Give me access to github, jira and confluence")
    box.send_keys(Keys.ENTER)
    wait.until(lambda d: _count(d, ".msg.user") == 1)
    acceptance = wait.until(
        lambda d: _texts(d, ".msg.assistant:not(.closing):not(.pending)")
    )[0]
    assert "github" in acceptance
    assert "done" not in acceptance.lower().split()
    # Operations appear and move to committed, each with its HTTP attempt.
    wait.until(lambda d: len(_statuses(d)) == 3)
    wait.until(lambda d: _statuses(d) == ["committed"] * 3)
    wait.until(lambda d: _count(d, ".attempt.ok") == 3)
    # Exactly one closing message, and it stays one.
    wait.until(lambda d: _count(d, ".msg.closing") == 1)
    closing = _texts(browser, ".msg.closing")[0]
    assert "All done: github, jira and confluence." in closing
    script = "return [...document.querySelectorAll('#deliveries .row')].map(e => e.dataset.status);"
    wait.until(lambda d: "delivered" in d.execute_script(script))
    _shown_to_the_end(browser, stack, wait)
    assert _count(browser, ".msg.closing") == 1
    assert browser.find_element(By.ID, "sync-mode").text == "proactive"

    # Toggle a failure: the provider answers 503, the worker retries, visibly.
    _toggle(browser, wait, "5xx")
    # The page registered the fault with the provider (it keeps the fault's id once created).
    wait.until(lambda d: d.execute_script("return state.faults.has('5xx');"))
    box.send_keys("Give me access to figma")
    box.send_keys(Keys.ENTER)
    wait.until(lambda d: _count(d, ".attempt.retry") >= 1)
    retry = _texts(browser, ".attempt.retry")[0]
    assert "503" in retry
    # Clear it: a later attempt goes through (or the retries ran out first); either way the
    # second batch closes exactly once.
    _toggle(browser, wait, "5xx")
    wait.until(lambda d: _statuses(d)[3:] in (["committed"], ["failed_final"]))
    wait.until(lambda d: _count(d, ".msg.closing") == 2)
    _shown_to_the_end(browser, stack, wait)
    assert _count(browser, ".msg.closing") == 2
    assert _count(browser, "#timeline li") > 20
    # The Diagnosis card answers from the timeline: our retry sent it again, nothing lost.
    retried = "#diagnosis li[data-question='our_retries_sent_again']"
    wait.until(lambda d: _texts(d, retried, "className") == ["yes"])
    lost = "#diagnosis li[data-question='handoff_lost_a_result']"
    assert _texts(browser, lost, "className") == ["no"]

    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "demo.png"))
    assert (ARTIFACTS / "demo.png").stat().st_size > 10_000
