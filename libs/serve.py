"""Running one service's app under uvicorn, as its settings (`ServeSettings`) say."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from libs.config import ServeSettings
from libs.heap import settle
from libs.tools import DeclarationError

# sysexits' EX_CONFIG: the supervisor does not restart a child that exits with it, because
# the same configuration would be refused again.
EXIT_CONFIG = 78


def configure_logging(service: str, level: str = "INFO") -> None:
    """One line per record, with the service name, at `level` (HOLDLINE_LOG_LEVEL)."""
    logging.basicConfig(
        level=level.upper(),
        format=f"%(asctime)s %(levelname)s {service} %(name)s: %(message)s",
    )
    # httpx logs every request it sends at INFO: a line per call to a system of record or a
    # model (a formatted record and a write each, measured ~3 % of the worker's CPU). Those
    # lines are for DEBUG; at any other level httpx says warnings and worse only.
    named = logging.getLevelName(level.upper())
    if isinstance(named, int):
        logging.getLogger("httpx").setLevel(
            named if named <= logging.DEBUG else max(named, logging.WARNING)
        )


def _exit_cleanly(_sig: int, _frame: FrameType | None) -> None:
    # uvicorn re-raises the SIGTERM it handled once it has shut down; by then the service
    # drained, so the process ends with 0 rather than dying of the signal.
    raise SystemExit(0)


def serve(
    app: FastAPI | Callable[[], FastAPI],
    *,
    service: str,
    settings: ServeSettings,
    proxy_headers: bool = True,
) -> None:
    """Serve the app on `settings.http` until SIGINT/SIGTERM.

    Given a factory, a configuration it refuses (`DeclarationError`) is printed as one plain
    line and the process exits with EXIT_CONFIG instead of a traceback.
    `proxy_headers=False`: uvicorn leaves the peer and scheme as they arrived.
    """
    configure_logging(service, settings.log_level)
    if not isinstance(app, FastAPI):
        try:
            app = app()
        except DeclarationError as exc:
            sys.stderr.write(f"{service}: refusing to start: {exc}\n")
            sys.stderr.flush()
            raise SystemExit(EXIT_CONFIG) from None
    settle(settings.heap)
    if settings.nice:
        os.nice(settings.nice)
    http = settings.http
    signal.signal(signal.SIGTERM, _exit_cleanly)
    uvicorn.run(
        app,
        host=http.host,
        port=http.port,
        log_level=settings.log_level.lower(),
        access_log=False,
        proxy_headers=proxy_headers,
        # uvloop and httptools (both in the `server` extra) when importable, else asyncio's
        # own loop and h11: the services work on either, uvloop costs less per message.
        loop="auto",
        http="auto",
        # Leave time for in-flight requests and consumer drains, within the supervisor's budget.
        timeout_graceful_shutdown=int(settings.graceful_shutdown_s),
    )
