"""The whole seed-002 phone conversation against `holdline run`, what `make run` starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.run import holdline_run

from .call import seed_conversation


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_a_twilio_client_holds_the_seed_conversation_against_make_run(
    tmp_path: Path,
) -> None:
    with holdline_run(tmp_path) as system:
        system.output.wait_for(r"all 5 services ready", 60)
        report = await seed_conversation(
            system.url("interaction-surface"), system.url("sandbox-provider")
        )
    assert report.ok, report.render()
    assert any(line.startswith("caller: ") for line in report.transcript), report.render()
