"""interaction-surface: channels, turns, admission and delivery execution.

Plane: interaction plane (see services/README.md). Packages: `core/` (the live view, the
one write path, the shared `Surface`), `delivery/` (the `Channel` protocol, routing, the
executor), and one package per channel: `chat/`, `voice/`, `agent/`; `app.py` composes them.
"""

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
