"""interaction-surface: channels, turns, admission and delivery execution.

Plane: interaction plane (see services/README.md).
"""

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
