"""Use holdline as the durable tool layer of your own agent.

Your agent keeps its own model, speech and turn-taking; holdline admits the tool calls,
runs them durably, and tells the agent when to say what, exactly once. Start holdline with
`make run`, then, in another terminal:

    .venv/bin/python examples/agent_quickstart.py            # or --url http://host:8080

Only `holdline.client` is used (`pip install 'holdline[client]'` elsewhere). The "model"
here is a stand-in that always asks for the same two tools; swap in your SDK's call where
marked. The script prints what it would tell the model and what it would say, then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

from holdline.client import HoldlineClient, HoldlineError, ToolCall


async def speak(text: str) -> None:
    """Your TTS and playback. Here: print it and pretend it took a moment."""
    print(f"  agent says: {text!r}")
    await asyncio.sleep(0.3)


async def main(url: str) -> None:
    """One conversation: two tool calls, one closing said when the user is quiet."""
    async with HoldlineClient(url) as hl:
        # A fresh user per run: holdline would (rightly) treat a repeat as the same request.
        session = await hl.create_session(user_id=f"ada-{uuid.uuid4().hex[:6]}", tenant_id="acme")
        print(f"session {session.session_id} (agent {session.agent})")

        # 1. Hand these to your model as its tools (format: openai | anthropic | json-schema).
        tools = await session.tools(format="openai")
        print("tools for the model:", ", ".join(t["function"]["name"] for t in tools))

        async with session.agent_stream() as stream:
            # 2. Your model answered the user with tool calls. Pass them on as they came
            #    (arguments as the JSON string the model emitted is fine) as one batch.
            answer = await session.tool_calls(
                [
                    ToolCall(tool_call_id="call_1", name="provision_access",
                             arguments=json.dumps({"accesses": ["github", "jira"]})),
                    ToolCall(tool_call_id="call_2", name="book_table",
                             arguments={"restaurant": "casa-pepe", "date": "2026-12-24",
                                        "time": "21:00", "party_size": 2}),
                ],
                user_text="Give me github and jira, and book casa-pepe for two at nine.",
            )
            # 3. Each output is the tool result for your model: honest, never "done".
            for result in answer.results:
                print(f"tool result for {result.tool_call_id}: {result.output}")
            await speak("I'm on it: access and a table are being arranged.")

            # 4. The user starts talking while the work runs: holdline holds the closing.
            await stream.signal(user_speaking=True)
            await asyncio.sleep(1.0)
            await stream.signal(user_speaking=False)

            # 5. holdline says when: one delivery.say for the whole batch, after quiet.
            say = await stream.next(timeout_s=30)
            for fact in say.facts:
                print(f"  fact: {fact.summary}")
            await stream.ack(say.delivery_id, "started")
            await speak(say.text)
            # Only after playback really finished (rule 7); "unheard" if the user cut in.
            await stream.ack(say.delivery_id, "spoken")

        # 6. Anything that found no moment to be said waits here for your next model call.
        pending = await session.pending()
        print("pending for the next model call:", pending.context or "(nothing)")
        snapshot = await session.snapshot()
        for message in snapshot["messages"]:
            print(f"history: {message['role']}: {message['text']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    try:
        asyncio.run(main(parser.parse_args().url))
    except (HoldlineError, OSError) as exc:
        raise SystemExit(f"holdline at the given URL did not answer as expected: {exc}") from exc
