"""``python -m services.batch_coordinator``."""

from __future__ import annotations

from libs.serve import serve

from .app import create_app
from .settings import DEFAULT_PORT, ENV_PREFIX, SERVICE


def main() -> None:
    """Serve the batch-coordinator until SIGINT/SIGTERM."""
    serve(create_app, service=SERVICE, env_prefix=ENV_PREFIX, default_port=DEFAULT_PORT)


if __name__ == "__main__":
    main()
