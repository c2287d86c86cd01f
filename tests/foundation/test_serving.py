"""What every service's serving shell sets up: its logging, and where a response's work runs."""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.serve import configure_logging

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def httpx_logger() -> Iterator[logging.Logger]:
    logger = logging.getLogger("httpx")
    level = logger.level
    yield logger
    logger.setLevel(level)


@pytest.mark.parametrize(
    ("level", "emitted"),
    [
        ("INFO", logging.WARNING),
        ("WARNING", logging.WARNING),
        ("ERROR", logging.ERROR),
        ("DEBUG", logging.DEBUG),
    ],
)
def test_httpx_logs_each_request_only_at_debug(
    httpx_logger: logging.Logger, level: str, emitted: int
) -> None:
    configure_logging("test", level)
    assert httpx_logger.level == emitted
    # httpx's line per request is an INFO record: written at DEBUG only.
    assert httpx_logger.isEnabledFor(logging.INFO) is (level == "DEBUG")


def _background_callables(tree: ast.AST) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"BackgroundTask", "add_task"}
            and node.args
        ):
            yield node.args[0]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (node.func.attr == "add_task" and node.args)
        ):
            yield node.args[0]


def test_a_response_s_background_work_runs_on_the_event_loop() -> None:
    """Starlette sends a plain function given as a response's background task to its thread
    pool: a thread hand-off per response, and asyncio objects touched from another thread
    (an `asyncio.Event.set` there wakes its waiter only when the loop next wakes). Every
    background task of the services is a coroutine function of the module that names it."""
    found = 0
    for path in sorted((ROOT / "services").rglob("*.py")) + sorted((ROOT / "libs").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        coroutines = {
            node.name for node in ast.walk(tree) if isinstance(node, ast.AsyncFunctionDef)
        }
        for target in _background_callables(tree):
            found += 1
            where = f"{path.relative_to(ROOT)}:{target.lineno}: {ast.unparse(target)}"
            assert isinstance(target, ast.Name), f"{where} is not a name"
            assert target.id in coroutines, f"{where} is not a coroutine function of the module"
    assert found, "no background task found: the walk no longer sees the chat turn's"
