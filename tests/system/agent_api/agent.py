"""A test agent: its own process, holdline.client and the standard library only.

    python tests/agent_api/agent.py URL SESSION_ID TOKEN MODE [AFTER]

MODE `hold` takes every delivery.say and never acknowledges it (a delivery stays `sent`, as
when a real agent dies mid-sentence); `speak` acknowledges `started` then `spoken`. Every
line on stdout is one JSON object: `ready` (with `clean`: no holdline server module was
imported), `say` (the frame) and `spoken`.
"""

from __future__ import annotations

import asyncio
import json
import sys

from holdline.client import HoldlineClient


def emit(**fields: object) -> None:
    """One event line for the test that drives this process."""
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def main(url: str, session_id: str, token: str, mode: str, after: int | None) -> None:
    """Serve the session's agent channel until killed."""
    server = {"libs", "services", "nats", "fastapi", "starlette", "uvicorn", "pydantic"}
    clean = not any(name.split(".")[0] in server for name in sys.modules)
    async with HoldlineClient(url) as hl:
        session = hl.session(session_id, token)
        async with session.agent_stream(after=after) as stream:
            emit(event="ready", clean=clean, connection_id=stream.connection_id)
            async for say in stream:
                emit(event="say", seq=say.seq, delivery_id=say.delivery_id, text=say.text)
                if mode == "speak":
                    await stream.ack(say.delivery_id, "started")
                    await stream.ack(say.delivery_id, "spoken")
                    emit(event="spoken", delivery_id=say.delivery_id)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(main(args[0], args[1], args[2], args[3], int(args[4]) if len(args) > 4 else None))
