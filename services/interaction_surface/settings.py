"""interaction-surface settings, from the environment.

- `INTERACTION_SURFACE_HOST` / `INTERACTION_SURFACE_PORT` (127.0.0.1:8080)
"""

from __future__ import annotations

from dataclasses import dataclass

from libs.config import BusSettings, HttpSettings


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the surface reads from its environment."""

    bus: BusSettings
    http: HttpSettings

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings."""
        return cls(
            bus=BusSettings.from_env(), http=HttpSettings.from_env("INTERACTION_SURFACE", 8080)
        )
