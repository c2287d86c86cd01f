"""``python -m services.delivery_policy``."""

from __future__ import annotations

from libs.serve import serve

from .app import create_app
from .settings import SERVICE, Settings


def main() -> None:
    """Serve the delivery-policy until SIGINT/SIGTERM."""
    settings = Settings.from_env()
    serve(create_app(settings), service=SERVICE, settings=settings.serve)


if __name__ == "__main__":
    main()
