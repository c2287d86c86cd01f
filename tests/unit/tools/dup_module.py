"""A tool module that declares a name another module already took (for the start-up checks)."""

from __future__ import annotations

from examples.payouts import DECLARATION
from libs.tools import ToolRegistry


def register(registry: ToolRegistry) -> None:
    """Declare `send_payout` a second time."""
    registry.declare(DECLARATION)
