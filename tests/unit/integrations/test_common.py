"""The adapters' shared, framework-free pieces (pure functions and the ordered outbox)."""

from __future__ import annotations

import asyncio

from holdline.client import Fact, HoldlineError, PendingDelivery
from holdline.integrations._common import (
    Outbox,
    facts_prompt,
    heard_prefix,
    pending_context,
    refused_output,
    tool_specs,
)

PARAMETERS = {"type": "object", "properties": {"accesses": {"type": "array"}}}


def test_tool_specs_read_both_openai_shapes() -> None:
    chat = {"type": "function", "function": {"name": "a", "description": "A.",
                                             "parameters": PARAMETERS}}
    responses = {"type": "function", "name": "b", "description": "B.", "parameters": PARAMETERS}
    bare = {"name": "c"}
    specs = tool_specs([chat, responses, bare])
    assert [(s.name, s.description) for s in specs] == [("a", "A."), ("b", "B."), ("c", "")]
    assert specs[0].parameters == PARAMETERS
    assert specs[2].parameters == {"type": "object", "properties": {}}


def test_heard_prefix_keeps_the_words_that_fit_in_the_time_played() -> None:
    text = "access to notion and gitlab is ready"
    assert heard_prefix(text, 0.0, 2.5) == ""
    assert heard_prefix(text, 1.0, 2.5) == "access to"
    assert heard_prefix(text, 60.0, 2.5) == text
    assert heard_prefix(text, -1.0, 2.5) == ""


def test_prompts_carry_every_fact_and_never_claim_more() -> None:
    facts = [Fact(operation_id="op1", tool="provision_access", status="committed",
                  summary="notion granted"),
             Fact(operation_id="op2", tool="provision_access", status="failed_final",
                  summary="gitlab refused")]
    prompt = facts_prompt("Notion is ready; GitLab was refused.", facts)
    assert "- provision_access (committed): notion granted" in prompt
    assert "- provision_access (failed_final): gitlab refused" in prompt
    pending = [PendingDelivery(delivery_id="d1", text="Notion is ready.")]
    assert pending_context(pending, "holdline's block") == "holdline's block"
    assert "- Notion is ready." in pending_context(pending, "")
    refused = refused_output(HoldlineError(422, "about:blank", "Unprocessable", "unknown tool"))
    assert "nothing was started" in refused
    assert "unknown tool" in refused


async def test_the_outbox_runs_jobs_in_order_and_survives_a_failing_one() -> None:
    done: list[int] = []
    box = Outbox("test")
    box.start()

    async def job(n: int) -> None:
        await asyncio.sleep(0.01 * (3 - n))
        if n == 1:
            raise RuntimeError("lost report")
        done.append(n)

    for n in range(3):
        box.put(lambda n=n: job(n))
    await box.drain(5.0)
    await box.stop()
    assert done == [0, 2]
