"""`python -m examples.deskapi`: serve the example help-desk API (DESK_HOST:DESK_PORT)."""

from __future__ import annotations

import os

import uvicorn

from .app import create_app


def main() -> None:
    """Serve until SIGINT/SIGTERM."""
    uvicorn.run(
        create_app(),
        host=os.environ.get("DESK_HOST", "127.0.0.1"),
        port=int(os.environ.get("DESK_PORT", "8095")),
        log_level=os.environ.get("DESK_LOG_LEVEL", "warning"),
        access_log=False,
    )


if __name__ == "__main__":
    main()
