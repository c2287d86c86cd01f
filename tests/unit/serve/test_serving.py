"""What every service's serving shell sets up: its logging, and where a response's work runs."""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from libs.json_response import JSONResponse
from libs.serve import configure_logging

ROOT = Path(__file__).resolve().parents[3]


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
    """What `BackgroundTask(f, ...)` and `.add_task(f, ...)` are given to run."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name in {"BackgroundTask", "add_task"}:
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


def test_json_answers_are_the_compact_text_the_standard_library_would_write() -> None:
    content = {
        "session_id": "s-1",
        "text": 'été, 東京, "quoted"\n',
        "operations": [{"status": "committed", "attempts": 1, "result": {"id": "r-1"}}],
        "ratio": 0.25,
        "big": 12345678901234,
        "none": None,
        "flags": [True, False],
    }
    body = JSONResponse(content).body
    assert body == json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()
    assert JSONResponse(content, media_type="application/problem+json").media_type == (
        "application/problem+json"
    )


def test_every_json_answer_of_the_services_is_encoded_by_msgspec() -> None:
    """Starlette's JSONResponse encodes with `json`, ~8x the CPU for a snapshot: the services
    import the one of `libs.json_response`."""
    paths = sorted((ROOT / "services").rglob("*.py")) + sorted((ROOT / "libs").rglob("*.py"))
    found = [
        (path.relative_to(ROOT), node.module)
        for path in paths
        if path != ROOT / "libs" / "json_response.py"
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
        if isinstance(node, ast.ImportFrom)
        and any(alias.name == "JSONResponse" for alias in node.names)
    ]
    assert found
    assert {module for _path, module in found} == {"libs.json_response"}, found
