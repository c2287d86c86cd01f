"""Running one service's app under uvicorn, configured from the environment."""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

from libs.config import HttpSettings, env_float


def configure_logging(service: str) -> None:
    """One line per record, with the service name, at HOLDLINE_LOG_LEVEL."""
    logging.basicConfig(
        level=os.environ.get("HOLDLINE_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s",
    )


def _exit_cleanly(_sig: int, _frame: FrameType | None) -> None:
    # uvicorn re-raises the SIGTERM it handled once it has shut down; by then the service
    # drained, so the process ends with 0 rather than dying of the signal.
    raise SystemExit(0)


def serve(
    app: FastAPI, *, service: str, env_prefix: str, default_port: int, proxy_headers: bool = True
) -> None:
    """Serve the app on `<PREFIX>_HOST:<PREFIX>_PORT` until SIGINT/SIGTERM.

    `proxy_headers=False`: uvicorn leaves the peer and scheme as they arrived.
    """
    configure_logging(service)
    http = HttpSettings.from_env(env_prefix, default_port)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    uvicorn.run(
        app,
        host=http.host,
        port=http.port,
        log_level=os.environ.get("HOLDLINE_LOG_LEVEL", "info").lower(),
        access_log=False,
        proxy_headers=proxy_headers,
        # Leave time for in-flight requests and consumer drains, within the supervisor's budget.
        timeout_graceful_shutdown=int(env_float("HOLDLINE_GRACEFUL_SHUTDOWN_S", 10.0)),
    )
