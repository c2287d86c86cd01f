"""interaction-surface: channels, turns, admission and delivery execution."""

from .app import create_app
from .settings import Settings

__all__ = ["Settings", "create_app"]
