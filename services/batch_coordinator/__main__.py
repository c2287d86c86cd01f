"""``python -m services.batch_coordinator``."""

from __future__ import annotations

from libs.serve import serve

from .app import create_app
from .settings import SERVICE, Settings


def main() -> None:
    """Serve the batch-coordinator until SIGINT/SIGTERM."""
    settings = Settings.from_env()
    serve(lambda: create_app(settings), service=SERVICE, settings=settings.serve)


if __name__ == "__main__":
    main()
