"""The provider's live state: what exists between start-up and shutdown of one process."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .callbacks import CallbackSender
from .completion import PendingCommits
from .engine import Engine
from .faults import FaultRegistry
from .metrics import Metrics
from .problems import ProblemError
from .settings import Settings
from .store import Store

log = logging.getLogger("holdline.sandbox_provider")


@dataclass(slots=True)
class Running:
    store: Store
    callbacks: CallbackSender
    engine: Engine


class Provider:
    """Built without I/O by ``create_app``; ``start``/``stop`` run in the app lifespan."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.faults = FaultRegistry()
        self._running: Running | None = None

    @property
    def running(self) -> Running:
        if self._running is None:
            raise ProblemError(503, "not-ready", "Not ready", "the provider is not started")
        return self._running

    @property
    def started(self) -> bool:
        return self._running is not None

    async def start(self) -> None:
        store = Store.open(self.settings.db_path)
        callbacks = CallbackSender(store, self.settings, self.metrics)
        commits = PendingCommits(store, callbacks, self.metrics)
        engine = Engine(
            store,
            self.settings,
            faults=self.faults,
            callbacks=callbacks,
            metrics=self.metrics,
            commits=commits,
        )
        engine.start()
        callbacks.start()
        self._running = Running(store, callbacks, engine)
        log.info(
            "sandbox provider ready: db=%s callbacks=%s",
            self.settings.db_path,
            self.settings.callback_url or "off",
        )

    def begin_shutdown(self) -> None:
        """Called as the server stops accepting: end injected latencies and hangs now."""
        if self._running is not None:
            self._running.engine.begin_shutdown()

    async def stop(self) -> None:
        running, self._running = self._running, None
        if running is None:
            return
        await running.engine.stop()
        await running.callbacks.stop()
        running.store.close()
