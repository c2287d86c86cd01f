"""``python -m demo.sandbox_provider``: serve the sandbox provider with uvicorn.

Configuration comes from the environment; see ``demo.sandbox_provider.settings``.
"""

from __future__ import annotations

import logging
import os
import socket

import uvicorn

from libs import callback_secret as callback_key

from .app import build_app
from .runtime import Provider
from .settings import Settings


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, provider: Provider) -> None:
        super().__init__(config)
        self._provider = provider

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Before uvicorn waits for open requests: injected hangs answer now rather than
        # being cancelled (and logged as crashes) when the grace period runs out.
        self._provider.begin_shutdown()
        await super().shutdown(sockets)


def main() -> None:
    settings = Settings.from_env()
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    if not os.environ.get(callback_key.ENV, "").strip():
        logging.getLogger(__name__).warning(
            "%s is not set: callbacks are signed with a random key of this process's own, "
            "which no worker started separately accepts (holdline run shares one key)",
            callback_key.ENV,
        )
    provider = Provider(settings)
    config = uvicorn.Config(
        build_app(provider),
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep the root logging set up above
        access_log=False,
        # Bounded so a slow client cannot stall shutdown.
        timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
    )
    _Server(config, provider).run()


if __name__ == "__main__":
    main()
