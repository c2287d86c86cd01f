"""A bad tools file stops the real processes at start-up: the worker alone and `holdline run`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from testkit.processes import ROOT
from testkit.run import holdline_run
from testkit.tools_file import GOOD
from testkit.tools_file import tools_file as _file


def test_the_worker_does_not_start_with_a_bad_file(tmp_path: Path) -> None:
    path = _file(tmp_path, GOOD.replace('project = "resource"', 'projects = "resource"'))
    done = subprocess.run(
        [sys.executable, "-m", "services.operation_worker"],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "HOLDLINE_TOOLS_FILE": str(path),
            "NATS_URL": "nats://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 78
    assert "Traceback" not in done.stderr
    assert (
        f"operation-worker: refusing to start: {path}: tools[0] ('open_ticket'): roles.projects"
        in done.stderr
    )


async def test_holdline_run_prints_the_refusal_and_stops(tmp_path: Path) -> None:
    path = _file(tmp_path, GOOD.replace("{result.id}", "{ticket_no}"))
    with holdline_run(tmp_path, {"HOLDLINE_TOOLS_FILE": str(path)}) as running:
        code = await asyncio.to_thread(running.proc.wait, 60)
        running.output.join()
        lines = running.output.lines
    assert code == 78
    text = "\n".join(lines)
    assert "refusing to start:" in text
    assert "closing: {ticket_no} is not a field" in text
    assert "refused its configuration" in text
    # Not restarted: each refusing service was started once.
    for name in ("operation-worker", "batch-coordinator", "interaction-surface"):
        assert sum(f"started {name} " in line for line in lines) <= 1
    assert "restarting in" not in text
